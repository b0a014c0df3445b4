"""Shared harness of the reliability tests (lifetimes, soak, bad input, concurrency).

``backends`` holds the tensor factories per memory type; each skips, naming the missing backend, when a
backend module, class or framework is absent, so the tests pick up backends as they land.
"""
