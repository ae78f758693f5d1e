"""The podgrouper operator: Ray CRs and pods -> PodGroups and pod stamps."""
