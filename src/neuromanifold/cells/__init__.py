"""Constructed networks with known answers: the test oracle and the demo."""

__all__: list[str] = []
