"""P02 online fair selection: adversarial inputs that gave silent wrong results are clear errors (audit), and the
compiled engine agrees with the numpy engine bit for bit on degenerate shapes and refuses the same inputs."""
import numpy as np
import pytest

from neurips25.fair_selection import (GFQ, PF, FairSelectionError, Instance, PerClassThreshold, advice_from_optimum,
                                      evaluate, frac_gfq, frac_gfq_loop, iid_instances, la_setaside)
from neurips25.fair_selection.setaside import set_aside


@pytest.fixture(scope="module")
def inst():
    return iid_instances(3, 40, 6, M=3, theta=10, rng=0)


@pytest.mark.parametrize("r", [-1, 3, 10])
def test_run_index_out_of_range(inst, r):                  # was an empty batch (R = 0)
    with pytest.raises(FairSelectionError, match="r"):
        inst.run(r)


@pytest.mark.parametrize("integral", [False, True])
def test_per_class_threshold_for_other_m(inst, integral):   # integral: one class's prices broadcast to all M
    with pytest.raises(FairSelectionError, match="1 class thresholds for instances with M = 3"):
        set_aside(inst, GFQ((1, 1, 1)), integral, PerClassThreshold([1.0], [10.0]))


@pytest.mark.parametrize("kw", [dict(reserve=5), dict(horizon=80)])
def test_pf_only_arguments_with_gfq(inst, kw):              # were ignored
    with pytest.raises(FairSelectionError, match="PF-only"):
        set_aside(inst, GFQ((1, 1, 1)), False, **kw)


def test_la_setaside_parts_from_other_instances(inst):      # R = 1 broadcast into every run; other data mixed in
    adv = advice_from_optimum(inst, (1, 1, 1))
    with pytest.raises(FairSelectionError, match="robust was computed on other"):
        la_setaside(inst, (1, 1, 1), adv, 0.5, robust=frac_gfq(inst.run(0), (1, 1, 1)))
    other = iid_instances(3, 40, 6, M=3, theta=10, rng=1)
    with pytest.raises(FairSelectionError, match="robust was computed on other"):
        la_setaside(inst, (1, 1, 1), adv, 0.5, robust=frac_gfq(other, (1, 1, 1)))
    same = Instance(inst.values.copy(), inst.classes.copy(), inst.k, inst.L, inst.U)
    np.testing.assert_array_equal(la_setaside(inst, (1, 1, 1), adv, 0.5, robust=frac_gfq(same, (1, 1, 1))).x,
                                  la_setaside(inst, (1, 1, 1), adv, 0.5).x)


@pytest.mark.parametrize("opt", [np.ones(5), np.ones(2), 5.0, [np.nan] * 3])
def test_evaluate_opt(inst, opt):                           # cut to R, IndexError, NaN ratios
    with pytest.raises(FairSelectionError, match=r"opt must be one finite OPT_fair per run, shape \(3,\)"):
        evaluate(inst, GFQ((1, 1, 1)), "greedy", opt=opt)


def test_evaluate_duplicate_names(inst):                    # summarise counted 2R runs
    with pytest.raises(FairSelectionError, match="duplicates"):
        evaluate(inst, GFQ((1, 1, 1)), ("greedy", "greedy"))


@pytest.mark.parametrize("values, sets, msg", [([1, 2, 3], [{0}, {1}], "same length"),
                                                ([1, 2], [{0}, {-1}], "class index -1"),
                                                ([1, np.nan], [{0}, {1}], "finite"),
                                                ([1, 2], [{0}, set()], "empty class set")])
def test_frac_gfq_loop_inputs(values, sets, msg):          # zip truncated, -1 wrapped, NaN rejected quietly
    with pytest.raises(FairSelectionError, match=msg):
        frac_gfq_loop(values, sets, 2, (1, 1), 1, 10)


@pytest.mark.parametrize("I", [iid_instances(1, 200, 20, M=10, theta=20, p_multi=0.5, rng=0),
                               iid_instances(2, 1, 1, M=1, rng=1),
                               Instance(np.zeros((1, 0)), np.zeros((1, 0, 2), bool), 3, 1, 20)])
def test_engines_bit_for_bit_on_degenerate_shapes(I):
    pytest.importorskip("numba")
    for q in ((0,) * I.M, (1,) + (0,) * (I.M - 1)):
        for integral in (False, True):
            for charging in ("multi", "single"):
                c = set_aside(I, q, integral, charging=charging, engine="compiled")
                n = set_aside(I, q, integral, charging=charging, engine="numpy")
                assert np.array_equal(c.x, n.x) and np.array_equal(c.credits, n.credits)
    c, n = set_aside(I, PF(0.5), False, engine="compiled"), set_aside(I, PF(0.5), False, engine="numpy")
    assert np.array_equal(c.x, n.x)


@pytest.mark.parametrize("engine", ["numpy", "compiled"])
@pytest.mark.parametrize("kw, msg", [(dict(fairness=(1, 1)), "2 quotas for M = 3"),
                                     (dict(fairness=PF(0.5), horizon=3), "horizon 3 is shorter"),
                                     (dict(fairness=(1, 1, 1), reserve=2), "PF-only"),
                                     (dict(fairness=(1, 1, 1), integral="yes"), "integral must be True or False")])
def test_engines_refuse_the_same_inputs(inst, engine, kw, msg):
    pytest.importorskip("numba")
    kw = dict(dict(integral=False), **kw)
    with pytest.raises(FairSelectionError, match=msg):
        set_aside(inst, engine=engine, **kw)
