"""Trial colours that never repeat: plotly's ten, then as many generated ones as there are trials.

A chart gives each trial the colour of its number on every page, so a trial reads the same
on the Sweep, Compare and Population pages. A base palette of ten colours indexed by
``number % 10`` would give trials 3 and 13 one colour in the same chart; instead the sequence
goes on past plotly's ten with colours generated in OKLab, a colour space in which equal
distances look about equally different (Ottosson, 2020):

* the hue of colour ``i`` is the fractional part of ``i / g`` turns and its lightness
  follows ``i / g²``, with ``g ≈ 1.3247`` the plastic number: the R2 low-discrepancy sequence,
  which spreads any run of consecutive indices evenly over the hue circle and the lightness
  band, so neighbours in the sequence are far apart and the spread stays even however many;
* the chroma is fixed and moderate, so every colour stays inside sRGB (what falls outside is
  clipped) and none is grey;
* a colour equal, as ``#rrggbb``, to an earlier one is skipped, so the sequence never
  repeats: distinct trial numbers get distinct colours.

The sequence depends only on the index, never on how many colours a chart asks for.
"""

from __future__ import annotations

import math
import threading

import plotly.colors as pc

BASE: tuple[str, ...] = tuple(pc.qualitative.Plotly)
"""Plotly's own default sequence: the first ten trials' colours."""
_G = 1.324717957244746  # the plastic number, root of x**3 = x + 1
LIGHTNESS = (0.48, 0.78)  # OKLab L: dark enough on white, light enough to tell apart
CHROMA = 0.13

_sequence: list[str] = list(BASE)
_seen: set[str] = set(BASE)
_next = 0  # the next index of the generator to try
_lock = threading.Lock()  # pages run in threads of one server


def _srgb(linear: float) -> float:
    """Linear light to the sRGB transfer curve, clipped to [0, 1]."""
    linear = min(1.0, max(0.0, linear))
    return 12.92 * linear if linear <= 0.0031308 else 1.055 * linear ** (1 / 2.4) - 0.055


def oklch_hex(lightness: float, chroma: float, hue_turns: float) -> str:
    """An OKLCh colour as ``#rrggbb`` (Ottosson's OKLab to linear sRGB, then sRGB's curve)."""
    a = chroma * math.cos(2 * math.pi * hue_turns)
    b = chroma * math.sin(2 * math.pi * hue_turns)
    lr = (lightness + 0.3963377774 * a + 0.2158037573 * b) ** 3
    mr = (lightness - 0.1055613458 * a - 0.0638541728 * b) ** 3
    sr = (lightness - 0.0894841775 * a - 1.2914855480 * b) ** 3
    rgb = (
        4.0767416621 * lr - 3.3077115913 * mr + 0.2309699292 * sr,
        -1.2684380046 * lr + 2.6097574011 * mr - 0.3413193965 * sr,
        -0.0041960863 * lr - 0.7034186147 * mr + 1.7076147010 * sr,
    )
    return "#" + "".join(f"{round(_srgb(c) * 255):02x}" for c in rgb)


def _generated(i: int) -> str:
    hue = (0.5 + i / _G) % 1.0
    low, high = LIGHTNESS
    lightness = low + (high - low) * ((0.5 + i / _G**2) % 1.0)
    return oklch_hex(lightness, CHROMA, hue)


def _grow(count: int) -> None:
    global _next
    with _lock:
        while len(_sequence) < count:
            candidate = _generated(_next)
            _next += 1
            if candidate not in _seen:
                _seen.add(candidate)
                _sequence.append(candidate)


def colour(index: int) -> str:
    """The ``index``-th colour of the sequence (see the module docstring)."""
    _grow(index + 1)
    return _sequence[index]


def colours(count: int) -> list[str]:
    """The first ``count`` colours: no two alike."""
    _grow(count)
    return _sequence[:count]
