"""A tiny module with one real bug, for the pytest-selfheal demo."""


def add(a: int, b: int) -> int:
    """Return the sum of a and b."""
    return a - b  # the bug: should be a + b


def mul(a: int, b: int) -> int:
    """Return the product of a and b."""
    return a * b
