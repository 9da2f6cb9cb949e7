"""Capture: run a PopTorch program with profiling on and record what Poplar's profile does not say.

* :mod:`popviz.capture.launcher` — ``popviz capture -- CMD``: the child process, its environment
  (engine options, bootstrap), the log and the run manifest ``popviz-run.json``;
* :mod:`popviz.capture.hooks` — wraps ``poptorch.trainingModel`` / ``inferenceModel`` executors
  and writes each engine's ``popviz-model.json``;
* :mod:`popviz.capture.api` — ``popviz.capture(dir)`` and ``popviz.wrap(executor)``.

Importing this package imports nothing else: the bootstrap of every captured Python process
goes through it.
"""
