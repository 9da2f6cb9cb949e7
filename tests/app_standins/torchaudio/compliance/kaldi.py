"""Stand-in: ``torchaudio.compliance.kaldi.fbank`` raises (no audio features here)."""


def fbank(*args, **kwargs):
    raise RuntimeError("torchaudio stand-in (popviz tests): no fbank; run with generated data")
