"""The read-only Streamlit dashboard: ``app.py`` (entry, started by ``hyperfleet dashboard``),
``views/`` (its pages), ``queries.py`` (reads), ``state.py`` (caching, live refresh) and the
modules that turn a sweep into tables and plotly figures."""
