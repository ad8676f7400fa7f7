"""Dead directions of trained networks (spec: ``dead_directions.md``)."""

__all__: list[str] = []
