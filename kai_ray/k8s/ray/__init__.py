"""Ray-aware reclaim: drain Ray nodes, then shrink worker groups through ``workersToDelete`` or suspend a RayJob."""
