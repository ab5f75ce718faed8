"""Every bad input to regattn.dp raises a ValueError that names it, on the compiled Viterbi
sweeps (which check the potentials as they read them) and on the torch reference."""

import pytest
import torch

from regattn import dp
from regattn.mappings import backend


@pytest.fixture(autouse=True, params=["compiled", "torch"])
def sweeps(request):
    """The compiled sweeps (forced) or the torch reference."""
    with backend("cpu" if request.param == "compiled" else "reference"):
        yield request.param


NAN, INF = float("nan"), float("inf")


def vit(**kw):
    theta = kw.pop("theta", torch.randn(2, 3, 4, 4))
    return lambda: dp.viterbi(theta, **kw)


def dec(**kw):
    theta = kw.pop("theta", torch.randn(2, 3, 4, 4))
    return lambda: dp.viterbi_decode(theta, **kw)


def dtw(**kw):
    theta = kw.pop("theta", torch.randn(2, 3, 4))
    return lambda: dp.dtw(theta, **kw)


def with_value(shape, idx, value):
    theta = torch.randn(*shape)
    theta[idx] = value
    return theta


CASES = {
    # theta: type, rank, squareness, empty dims
    "viterbi rank 3": (vit(theta=torch.randn(3, 4, 4)), "theta must be"),
    "viterbi rank 5": (vit(theta=torch.randn(1, 2, 3, 4, 4)), "theta must be"),
    "viterbi non-square": (vit(theta=torch.randn(2, 3, 4, 5)), "square"),
    "viterbi T=0": (vit(theta=torch.randn(2, 0, 4, 4)), "empty"),
    "viterbi S=0": (vit(theta=torch.randn(2, 3, 0, 0)), "empty"),
    "viterbi integer theta": (vit(theta=torch.ones(2, 3, 4, 4, dtype=torch.long)), "floating"),
    "viterbi list theta": (vit(theta=[[[[0.0]]]]), "floating"),
    "dtw rank 2": (dtw(theta=torch.randn(3, 4)), "theta must be"),
    "dtw m=0": (dtw(theta=torch.randn(2, 0, 4)), "empty"),
    "decode non-square": (dec(theta=torch.randn(2, 3, 4, 5)), "square"),
    # values
    "viterbi NaN": (vit(theta=with_value((2, 3, 4, 4), (1, 2, 0, 3), NAN)), "NaN"),
    "viterbi +inf": (vit(theta=with_value((2, 3, 4, 4), (0, 0, 0, 0), INF)), r"\+inf"),
    "viterbi no finite path": (vit(theta=with_value((2, 3, 4, 4), (1, 1), -INF)), "no path"),
    "decode NaN": (dec(theta=with_value((2, 3, 4, 4), (1, 2, 0, 3), NAN)), "NaN"),
    "decode no finite path": (dec(theta=with_value((2, 3, 4, 4), (1, 1), -INF)), "no path"),
    "dtw NaN": (dtw(theta=with_value((2, 3, 4), (0, 1, 1), NAN)), "NaN"),
    "dtw +inf": (dtw(theta=with_value((2, 3, 4), (0, 1, 1), INF)), "infinite"),
    "dtw -inf": (dtw(theta=with_value((2, 3, 4), (0, 1, 1), -INF)), "infinite"),
    "viterbi NaN inside lengths": (
        vit(theta=with_value((2, 3, 4, 4), (1, 1), NAN), lengths=torch.tensor([3, 2])),
        "NaN",
    ),
    # reg and gamma
    "viterbi unknown reg": (vit(reg="sparsemax"), "reg must be one of"),
    "dtw unknown reg": (dtw(reg=None), "reg must be one of"),
    "viterbi gamma 0": (vit(gamma=0.0), "gamma"),
    "viterbi gamma < 0": (vit(gamma=-1.0), "gamma"),
    "viterbi gamma nan": (vit(gamma=NAN), "gamma"),
    "viterbi gamma inf": (vit(gamma=INF), "gamma"),
    "viterbi gamma str": (vit(gamma="1"), "gamma"),
    "viterbi gamma tensor": (vit(gamma=torch.tensor(1.0)), "gamma"),
    "dtw gamma 0": (dtw(gamma=0), "gamma"),
    # lengths
    "viterbi lengths 0": (vit(lengths=torch.tensor([0, 3])), r"lengths must lie in \[1, 3\]"),
    "viterbi lengths > T": (vit(lengths=torch.tensor([4, 3])), r"lengths must lie in \[1, 3\]"),
    "viterbi lengths shape": (vit(lengths=torch.tensor([3, 3, 3])), r"shape \(2,\)"),
    "viterbi lengths 2-d": (vit(lengths=torch.tensor([[3, 3]])), r"shape \(2,\)"),
    "viterbi lengths float": (vit(lengths=torch.tensor([3.0, 2.0])), "integer"),
    "viterbi lengths bool": (vit(lengths=torch.tensor([True, True])), "integer"),
    "viterbi lengths junk": (vit(lengths="abc"), "lengths"),
    "decode lengths > T": (dec(lengths=[4, 1]), r"lengths must lie in \[1, 3\]"),
    "dtw lengths tensor": (dtw(lengths=torch.tensor([3, 4])), "pair"),
    "dtw lengths triple": (dtw(lengths=([3, 3], [4, 4], [1, 1])), "pair"),
    "dtw lengths m out of range": (dtw(lengths=([4, 3], [4, 4])), r"lengths\[0\] must lie"),
    "dtw lengths n out of range": (dtw(lengths=([3, 3], [0, 4])), r"lengths\[1\] must lie"),
    "dtw lengths n shape": (dtw(lengths=([3, 3], [4])), r"lengths\[1\] must have shape"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_raises_value_error(name):
    call, match = CASES[name]
    with pytest.raises(ValueError, match=match):
        call()


def test_good_inputs_around_the_bad_ones():
    theta = torch.randn(2, 3, 4, 4)
    theta[1, 2:] = NAN  # past the end: ignored
    theta[0, :, 0, :] = -INF  # state 0 unreachable after t = 0, others fine
    for reg in ("entropy", "l2"):
        assert torch.isfinite(dp.viterbi(theta, reg=reg, gamma=2, lengths=[3, 2])).all()
    assert dp.viterbi_decode(theta, lengths=(3, 2)).shape == (2, 4)
    assert dp.dtw(torch.randn(2, 3, 4), lengths=([3, 1], [1, 4])).shape == (2,)
    assert dp.viterbi(torch.randn(0, 3, 2, 2)).shape == (0,)
