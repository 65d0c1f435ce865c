"""A sweep's life outside the control loop: submitting and running it (``run``), warm-start
points (``enqueue``), one training run without search (``train``), the checks made before
anything is written (``preflight``, ``probe``), where its files go and whose they are
(``paths``, ``ownership``), and the read-side summaries the CLI and dashboard print
(``results``)."""
