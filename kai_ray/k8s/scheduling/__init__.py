"""The scheduler/binder operator: watches -> snapshot -> ``run_cycle`` -> bindings, evictions, status, Events."""
