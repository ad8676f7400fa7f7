"""Pluggable detectors naming candidate dead directions per block."""

__all__: list[str] = []
