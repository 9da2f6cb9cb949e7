"""Stand-in for horovod.torch (see ../../README.md): importable; every use raises."""


def __getattr__(name: str):
    raise RuntimeError(f"horovod.torch.{name}: horovod is not installed (a stand-in from popviz's tests); "
                       "run the application as a single instance")
