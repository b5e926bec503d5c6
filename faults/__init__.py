"""The built-in fault library of llm-drill.

Each fault is a :class:`drill.api.Fault` registered through the ``drill.faults`` entry point,
exactly like a third-party plugin; this package imports nothing from ``drill`` but
``drill.api`` (``tests/faults/test_import_boundary.py`` enforces it) and registers nothing on
import. ``drill faults list`` shows the catalogue, ``drill faults describe KIND`` one fault.

=====================  ==================================================  ============================
module                 kinds                                               mechanisms
=====================  ==================================================  ============================
``load``               ``queue_flood``                                     the drill's load driver
``slow``               ``slow_replica``                                    Toxiproxy, Docker CPU, stack
``network``            ``link_reset``, ``partition``                       Toxiproxy
``interconnect``       ``nccl_degradation``                                Toxiproxy; netem, NCCL env
``gpu``                ``gpu_oom``, ``gpu_clock_cap``                      stack admin; CUDA, nvidia-smi
``lifecycle``          ``replica_crash``, ``replica_pause``                signals, Docker
``router``             ``router_retry_storm``                              the router's admin API
=====================  ==================================================  ============================
"""
