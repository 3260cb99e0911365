"""Every memstore error survives pickling (a process boundary) with its type and fields."""

from __future__ import annotations

import inspect
import pickle

import pytest

from memstore import errors
from memstore.importers import ImportSourceError

FIELD_VALUES = {
    "size": 10,
    "limit": 5,
    "line": 7,
    "field": "text",
    "index": 3,
    "call_id": "c1",
    "soonest_expiry_seconds": 2.5,
    "kind": "missing schema",
    "code": "42P01",
    "driver_error": "UndefinedTable",
    "key_id": "k2",
    "provider": "openai",
    "extra": "crypto",
    "install": "pip install 'memstore[crypto]'",
    "app_id": "app-1",
    "ids": (11, 12),
}

ERRORS = sorted(
    (
        cls
        for cls in [*vars(errors).values(), ImportSourceError]
        if inspect.isclass(cls) and issubclass(cls, errors.MemstoreError)
    ),
    key=lambda cls: cls.__name__,
)


def raised(cls: type[errors.MemstoreError]) -> errors.MemstoreError:
    parameters = inspect.signature(cls.__init__).parameters
    keywords = {
        name: FIELD_VALUES[name]
        for name, parameter in parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    }
    return cls("it went wrong", **keywords)


@pytest.mark.parametrize("cls", ERRORS, ids=lambda cls: cls.__name__)
def test_an_error_comes_back_from_pickle_as_it_was(cls: type[errors.MemstoreError]) -> None:
    error = raised(cls)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is cls
    assert str(copy) == str(error) and copy.args == error.args
    assert vars(copy) == vars(error)
    assert copy.detail == error.detail


def test_every_error_with_fields_is_covered() -> None:
    with_fields = [cls for cls in ERRORS if vars(raised(cls)).keys() - {"detail"}]
    assert len(ERRORS) > 20 and len(with_fields) >= 8
