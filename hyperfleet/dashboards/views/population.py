"""Population: a PBT/PB2 sweep's family tree (members as lanes over steps, an edge from donor
to receiver at each exploit, the explored hyperparameters along each lane; see
:mod:`hyperfleet.dashboards.tree`), the winning member's full schedule, every exploit, and
the members' curves of the objective."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from hyperfleet.dashboards import charts, scales, state, tree, widgets
from hyperfleet.dashboards.format import number, params_text
from hyperfleet.dashboards.queries import PopulationData, SweepData


def winner(data: SweepData, pop: PopulationData) -> int | None:
    """The best member: the sweep's best trial, else the best stored score."""
    best = data.best()
    if best is not None and best.number in pop.members:
        return best.number
    scored = [m for m in pop.members.values() if m.score is not None]
    if not scored:
        return None
    maximize = data.directions[0] == "maximize"
    return (max if maximize else min)(scored, key=lambda m: m.score).number  # type: ignore[arg-type,return-value]


def exploits_frame(pop: PopulationData) -> pd.DataFrame:
    """One row per exploit, in the order they happened, with the explored params."""
    after = {(e.member, e.generation): e.new_params for e in pop.events if e.kind == "explore"}
    rows = [
        {
            "step": e.step,
            "member": e.member,
            "donor": e.donor,
            "donor step": e.donor_step,
            "member score": number(e.member_score),
            "donor score": number(e.donor_score),
            "before": params_text(e.old_params),
            "after explore": params_text(after.get((e.member, e.generation), e.new_params)),
        }
        for e in pop.exploits
    ]
    return pd.DataFrame(rows)


def _colour_param(data: SweepData) -> tuple[str | None, bool]:
    numeric = [n for n, s in data.space.items() if s.get("type") in ("float", "int")]
    if not numeric:
        return None, False
    pick = st.selectbox("colour by", numeric, key=f"colour-{data.name}")
    return pick, bool(data.space[pick].get("log"))


def body(url: str, name: str) -> None:
    data = state.sweep(url, name)
    st.title(f"Population of {name}")
    state.freshness(data.fetched_at, data.running)
    if not data.is_population:
        st.info(
            f"{name} is a {data.scheduler} sweep, not population-based training: pick a "
            f"PBT or PB2 sweep in the sidebar."
        )
        return
    pop = state.population(url, name)
    if not pop.members:
        st.info("No member has started yet.")
        return
    win = winner(data, pop)
    a, b, c, d = st.columns(4)
    a.metric("members", len(pop.members))
    b.metric("exploits", len(pop.exploits))
    c.metric("most generations", max(m.generation for m in pop.members.values()))
    d.metric("winner", "-" if win is None else f"member {win}")
    colour, log = _colour_param(data)
    st.plotly_chart(tree.figure(pop, win, colour, log), width="stretch", key="tree")
    if win is not None:
        st.subheader(f"Member {win}'s full schedule")
        rows = [{"from step": s, "params": params_text(p)} for s, p in pop.schedules.get(win, [])]
        st.table(pd.DataFrame(rows), hide_index=True)  # steps as a column: an int index is hidden
        st.caption(
            f"Re-run it as one plain training run: `hyperfleet sweep replay {name} --member {win}`"
        )
    st.subheader("Exploits")
    if pop.exploits:
        st.dataframe(exploits_frame(pop), hide_index=True, width="stretch", key="exploits")
    else:
        st.info("No member has exploited another yet.")
    _member_curves(data, win)


def _member_curves(data: SweepData, win: int | None) -> None:
    st.subheader(f"Members' {data.metrics[0]}")
    cfg = state.settings()
    found = state.curves(state.tracking_uri(cfg, data), data, list(data.records), data.metrics[0])
    if found:
        states = {t.number: t.state for t in data.summary.trials}
        choice = widgets.scale_switch(st, f"scale-member-curves-{data.name}")
        fig = charts.learning_curves(
            found,
            states,
            "step",
            win,
            title=f"{data.metrics[0]} of every member by step",
            label="member",
        )
        metric = data.metrics[0]
        widgets.show(st, fig, "member-curves", scales.axis(fig, "y", choice, metric))


def main() -> None:
    cfg = state.settings()
    name = st.session_state.get("sweep")
    if not name:
        st.title("Population")
        st.info(f"No sweeps yet. Start one with `{state.START_HINT}`.")
        return
    running = state.sweep(cfg.storage, name).running
    state.live(lambda: body(cfg.storage, name), running, f"population-{name}")


main()
