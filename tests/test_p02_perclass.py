"""Per-class thresholds θ_j (issue 31 item 3): the paper's FRAC-GFQ takes one θ_j per class. With equal ranges the
per-class rule is the single threshold exactly; on a stream of one class it is that class's one-way-trading rule, so
the class gets the tighter 1 + ln θ_j; the compiled engine refuses it clearly and the numpy engine runs it."""
import numpy as np
import pytest

from neurips25.fair_selection import (GFQ, FairSelectionError, Instance, OneWayTradingThreshold, PerClassThreshold,
                                      d_setaside_gfq, frac_gfq, iid_instances, offline_optimum, threshold_worst_case)


@pytest.mark.parametrize("seed", range(4))
def test_equal_ranges_equal_the_single_threshold(seed):
    inst = iid_instances(5, 250, 20, M=3, theta=30, p_multi=0.3, rng=seed)
    q = GFQ((2, 2, 1))
    pc = PerClassThreshold([1.0] * 3, [30.0] * 3)
    np.testing.assert_array_equal(frac_gfq(inst, q, phi=pc).x, frac_gfq(inst, q, engine="numpy").x)
    np.testing.assert_array_equal(d_setaside_gfq(inst, q, phi=pc).x, d_setaside_gfq(inst, q, engine="numpy").x)


def test_class_alone_gets_its_own_ratio_inside_frac_gfq():
    w = threshold_worst_case(K=20, theta=4.0, levels=200)
    inst = Instance(w.values, np.concatenate([w.classes, np.zeros_like(w.classes)], 2), w.k, 1.0, 50.0)
    q = GFQ((0, 0))
    pc = PerClassThreshold([1.0, 1.0], [4.0, 50.0])
    a = frac_gfq(inst, q, phi=pc)
    np.testing.assert_allclose(a.x, frac_gfq(inst, q, phi=OneWayTradingThreshold(1.0, 4.0), engine="numpy").x, atol=1e-12)
    ratio = (offline_optimum(inst, q) / a.value).max()
    glob = (offline_optimum(inst, q) / frac_gfq(inst, q).value).max()
    assert ratio <= 1 + np.log(4.0) + 1e-6 < glob


def test_mixed_classes_take_the_best_class_and_keep_quotas():
    inst = iid_instances(8, 300, 20, M=2, theta=30, p_multi=0.4, class_shift=(0.0, -1.0), rng=7)
    q = GFQ((3, 3))
    pc = PerClassThreshold([1.0, 1.0], [30.0, 8.0])
    a = frac_gfq(inst, q, phi=pc)
    assert (a.counts >= q.targets(inst) - 1e-9).all() and (a.used <= inst.k + 1e-9).all()
    # a class-1 agent is accepted up to phi_1^{-1}(v) >= phi^{-1}(v): never less than under the global threshold alone
    g = OneWayTradingThreshold(1.0, 30.0)
    v = np.linspace(1, 30, 50)
    both = np.ones((50, 2), bool)
    assert (pc.inv_classes(v, both) >= g.inv(v) - 1e-15).all()


def test_bad_input_is_one_clear_error():
    inst = iid_instances(2, 50, 10, M=3, theta=10, rng=0)
    with pytest.raises(FairSelectionError, match="2 class thresholds for instances with M = 3"):
        frac_gfq(inst, (1, 1, 1), phi=PerClassThreshold([1, 1], [10, 10]))
    with pytest.raises(FairSelectionError, match="engine='compiled' covers"):
        frac_gfq(inst, (1, 1, 1), phi=PerClassThreshold([1] * 3, [10] * 3), engine="compiled")
    with pytest.raises(FairSelectionError, match="0 < L_j <= U_j"):
        PerClassThreshold([1, np.nan], [2, 3])
