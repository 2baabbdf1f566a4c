"""parse_params: pydantic errors become one InvalidArgument naming the request's own field paths."""
import math

import pytest
from pydantic import Field

from services.common.errors import InvalidArgument
from services.common.params import JobParams, ModelName, parse_params


class Train(JobParams):
    name: ModelName = "guard"
    lr: float = Field(1e-3, gt=0)
    epochs: int = Field(3, ge=1)
    layers: list[int] = [64]


def _fields(exc):
    return {v.field: v.description for v in exc.value.violations}


def test_valid_params_round_trip():
    p = parse_params(Train, {"lr": 0.1, "layers": [8, 8]})
    assert p.lr == 0.1 and p.layers == [8, 8] and p.name == "guard"
    assert parse_params(Train, p) is p


@pytest.mark.parametrize("bad,field", [
    ({"lr": 0}, "params.lr"), ({"lr": math.nan}, "params.lr"), ({"lr": math.inf}, "params.lr"),
    ({"epochs": "x"}, "params.epochs"), ({"layers": [1, "a"]}, "params.layers[1]"),
    ({"name": "bad name!"}, "params.name"), ({"nope": 1}, "params.nope"),
])
def test_each_bad_field_is_named(bad, field):
    with pytest.raises(InvalidArgument) as e:
        parse_params(Train, bad, prefix="params.")
    assert field in _fields(e)


def test_field_paths_map_to_where_the_request_carries_a_field():
    with pytest.raises(InvalidArgument) as e:
        parse_params(Train, {"lr": -1, "epochs": 0}, field_paths={"lr": "extra_params.lr"})
    assert set(_fields(e)) == {"extra_params.lr", "epochs"}
    assert "unknown parameter" in _fields(pytest.raises(InvalidArgument, parse_params, Train, {"x": 1}))["x"]
