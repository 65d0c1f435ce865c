"""The long-running servers hyperfleet starts for itself: the native stack (``stack``), its
processes (``processes``) and its own PostgreSQL cluster (``postgres``).

The stack's defaults are here, where ``hyperfleet stack`` reads them without importing the
servers' code."""

#: defaults away from the common ports (5432, 5000, 8501) so a stack coexists with them
PORTS = {"postgres": 15432, "mlflow": 15000, "dashboard": 18501}
DEFAULT_STATE = "hyperfleet-stack"  # the stack's data, logs and pids (``--state-dir``)
DEFAULT_ADDRESS = "127.0.0.1"  # where the stack serves (``--address``): this host only
DEFAULT_WORKERS = 2  # workers the stack starts on its host (``--workers``)
