"""Cost arithmetic, checked against figures worked out by hand."""

from __future__ import annotations

import math

import pytest

from sim.plan.costs import (
    OwnershipAssumptions,
    deployment_cost,
    ownership_usd_per_hour,
    replicas_needed,
    usd_per_million_output_tokens,
)


def test_rental_cost_per_million_tokens_is_hourly_price_over_tokens_per_hour():
    # $2.50/hour at 1,000 output tok/s = 3.6 M tokens/hour -> 2.5 / 3.6 = $0.69444 per M tokens.
    assert usd_per_million_output_tokens(2.5, 1000.0) == pytest.approx(0.694444, rel=1e-5)


def test_ownership_hour_is_amortised_purchase_plus_energy():
    # $30,000 over 3 years at 100% use: 30000 / (3 * 8760) = $1.14155/h;
    # 700 W at $0.15/kWh: 0.7 kW * 0.15 = $0.105/h. Total $1.24655/h.
    a = OwnershipAssumptions(years=3, electricity_usd_per_kwh=0.15, utilization=1.0)
    assert ownership_usd_per_hour(30_000, 700, a) == pytest.approx(1.246553, rel=1e-6)


def test_half_utilisation_doubles_capital_but_not_energy_per_serving_hour():
    # 30000 / (3 * 8760 * 0.5) = $2.283105/h capital + $0.105/h energy = $2.388105/h.
    a = OwnershipAssumptions(years=3, electricity_usd_per_kwh=0.15, utilization=0.5)
    assert ownership_usd_per_hour(30_000, 700, a) == pytest.approx(2.388105, rel=1e-6)


def test_unknown_prices_give_none_not_zero():
    a = OwnershipAssumptions()
    assert ownership_usd_per_hour(None, 700, a) is None
    assert ownership_usd_per_hour(30_000, None, a) is None
    assert usd_per_million_output_tokens(None, 1000) is None
    assert usd_per_million_output_tokens(2.0, 0.0) is None


def test_replicas_round_up_and_tolerate_float_noise():
    assert replicas_needed(50, 12.0) == 5          # 4.17 -> 5
    assert replicas_needed(50, 25.0) == 2          # exactly 2
    assert replicas_needed(50, 50 / 2 * (1 + 1e-15)) == 2
    assert replicas_needed(0.5, 3.0) == 1          # at least one replica
    assert replicas_needed(10, None) is None
    assert replicas_needed(10, 0.0) is None


def test_deployment_cost_pays_for_every_replica_at_the_target_throughput():
    # 5 replicas of H100 ($2.5/h rent, $30k, 700 W), target 50 req/s x 200 output tokens = 10,000 tok/s
    # = 36 M tokens/hour. Rental: 5 * 2.5 = $12.5/h -> 12.5 / 36 = $0.347222/M.
    # Ownership: 5 * 1.246553 = $6.232763/h -> 6.232763 / 36 = $0.173132/M.
    d = deployment_cost(replicas=5, output_tok_s=50 * 200, rental_price_usd_per_hour=2.5, purchase_usd=30_000,
                        power_w=700, assumptions=OwnershipAssumptions(3, 0.15, 1.0))
    assert d.rental_usd_per_hour == pytest.approx(12.5)
    assert d.rental_usd_per_million_output_tokens == pytest.approx(12.5 / 36, rel=1e-9)
    assert d.ownership_usd_per_hour == pytest.approx(6.232763, rel=1e-6)
    assert d.ownership_usd_per_million_output_tokens == pytest.approx(0.173132, rel=1e-5)


@pytest.mark.parametrize("kwargs", [{"years": 0}, {"utilization": 0}, {"utilization": 1.5},
                                    {"electricity_usd_per_kwh": -1}])
def test_impossible_assumptions_are_refused(kwargs):
    with pytest.raises(ValueError):
        OwnershipAssumptions(**kwargs)


def test_cost_is_finite_for_any_positive_throughput():
    assert math.isfinite(usd_per_million_output_tokens(1.0, 1e-6))


def test_sweep_rows_price_every_device_of_the_deployment():
    """2 replicas x tp 2 = 4 H100s; a 1 x H100 prefill + 2 x L40S decode pool = 1 + 2 devices."""
    from sim.catalog.hardware import load_profile
    from sim.plan.costs import OwnershipAssumptions
    from sim.plan.runner import _cost_columns

    h100 = load_profile("h100-sxm").price.rental_usd_per_hour
    l40s = load_profile("l40s").price.rental_usd_per_hour
    a = OwnershipAssumptions()
    tp = _cost_columns("h100-sxm", {"replicas": 2, "tp": 2, "pp": 1}, 1000.0, a)
    assert tp["devices"] == 4 and tp["rental_usd_per_hour"] == 4 * h100
    # $/M tokens = $/h / (tokens/s x 3600 / 1e6)
    assert abs(tp["cost_rental_usd_per_million_output_tokens"] - 4 * h100 / 3.6) < 1e-9
    pools = {"prefill": {"hw": "h100-sxm", "replicas": 1}, "decode": {"hw": "l40s", "replicas": 2}}
    dis = _cost_columns("l40s", {"disagg": pools, "tp": 1, "pp": 1}, 1000.0, a)
    assert dis["devices"] == 3 and abs(dis["rental_usd_per_hour"] - (h100 + 2 * l40s)) < 1e-12
