"""``poptorch._poplar_executor``: where PopTorch defines ``PoplarExecutor`` (optimum-graphcore
checks ``isinstance(model, poptorch._poplar_executor.PoplarExecutor)``); the emulator's
executor and compile hooks, under PopTorch's module name."""

from popviz.emulator.executor import PoplarExecutor, registerPostCompileHook, registerPreCompileHook

__all__ = ["PoplarExecutor", "registerPostCompileHook", "registerPreCompileHook"]
