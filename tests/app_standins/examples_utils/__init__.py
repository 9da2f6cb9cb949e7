"""Stand-in for Graphcore's examples_utils (see ../README.md): ``load_lib`` needs the Poplar SDK."""


def load_lib(*args, **kwargs):
    raise RuntimeError("examples_utils.load_lib builds C++ custom ops against the Poplar SDK: not available "
                       "under popviz's emulator; run the application with --custom-ops False")
