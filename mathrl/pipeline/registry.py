"""Named implementations of one setting: advantage estimators, policy losses, token selections.

A `Registry` is a dict from name to implementation that refuses a name registered twice and
answers an unknown name with the setting's key and the allowed names, the error a user sees
for a misspelt `train.algorithm`, `train.policy_loss` or `train.token_selection`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(dict[str, T], Generic[T]):
    def __init__(self, setting: str, kind: str):
        super().__init__()
        self.setting = setting  # the configuration key whose values are this registry's names
        self.kind = kind  # what one entry is, in words ("policy loss")

    def add(self, name: str, value: T) -> T:
        if name in self:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self[name] = value
        return value

    def register(self, name: str) -> Callable[[T], T]:
        """A decorator registering the decorated function as `name`."""
        return lambda fn: self.add(name, fn)

    def lookup(self, name: str) -> T:
        if name not in self:
            raise ValueError(f"{self.setting}: {name!r} is not allowed; allowed: {', '.join(self)}")
        return self[name]
