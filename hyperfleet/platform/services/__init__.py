"""The long-running servers hyperfleet starts for itself: the native stack (``stack``), its
processes (``processes``) and its own PostgreSQL cluster (``postgres``)."""
