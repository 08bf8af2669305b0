"""Communication: weight AllGather segmentation, exposure, communication on the critical path, copy bandwidth (A5-A8).

Modules: segments (the AllGathers cut once per trace and options), allgather, exposure, communication."""
