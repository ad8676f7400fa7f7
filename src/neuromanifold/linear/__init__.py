"""Linear networks as polynomial maps (spec: ``linear_networks.md``)."""

__all__: list[str] = []
