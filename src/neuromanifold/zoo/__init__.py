"""Small real models, embedded data (scikit-learn digits) and training recipes."""

__all__: list[str] = []
