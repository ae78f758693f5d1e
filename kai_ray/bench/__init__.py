"""Every benchmark: the scheduler core (``core``), end to end on a real API server (``e2e``, with ``tracking``
watching its pods and the API server's counters), against KAI's own scheduler (``vs_kai``), the reliability runs
(``chaos``, ``fuzz``, ``failover``: how long scheduling stops when the leader goes), the headline's figures read from
what its workloads leave (``headline``), node-hours a real Karpenter buys with and without the queue-admission gate
(``nodehours``), synthetic traces (``trace_gen``), and their commands (``cli``).

Not runtime code: the runtime wheel leaves this package out, and no runtime package imports it but the CLI's one
guarded entry (:mod:`kai_ray.cli.commands`). Install a checkout with the ``bench`` extra to use it.
"""
