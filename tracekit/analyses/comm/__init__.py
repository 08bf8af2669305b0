"""Communication: weight AllGather segmentation, exposure, communication on the critical path, copy bandwidth (A5-A8).

Modules: allgather."""
