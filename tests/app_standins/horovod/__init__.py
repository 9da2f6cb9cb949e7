"""Stand-in for horovod (see ../README.md): importable; every use raises."""
