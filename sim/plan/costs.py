"""What serving costs: dollars per hour of a replica and dollars per million output tokens.

Two ways to pay for a replica (one device running one engine):

- **rental**: the profile's `price.rental_usd_per_hour`, paid for the hours the replica runs.
- **ownership**: buy the device at `price.purchase_usd`, write it off linearly over `years`, and pay
  for its electricity. Per hour of serving, at utilisation U (the share of the device's life it
  spends serving this workload; the rest it is idle or off and draws no power in this model):

      ownership_usd_per_hour = purchase_usd / (years * 8760 h * U)          # amortised capital
                             + power_w / 1000 * electricity_usd_per_kwh      # energy while serving

  `power_w` is the profile's board (or whole-system, for SoCs) power under load: the energy term
  is an upper bound for the device itself and leaves out the host, cooling and networking.

Cost per million output tokens divides an hourly cost by the output tokens produced in that hour:

      usd_per_million_output_tokens = usd_per_hour / (output_tok_s * 3600 s) * 1e6

Numbers missing from a profile (no rental price, no purchase price, no power figure) give `None`,
never a guessed value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

HOURS_PER_YEAR = 8760.0  # 365 days x 24 h; the leap day is below the precision of any price here


@dataclass(frozen=True)
class OwnershipAssumptions:
    """The user's inputs to the ownership cost. The defaults are round assumptions, not quotes:
    3 years is a common write-off horizon for accelerators, 0.15 $/kWh a round electricity
    price, and utilisation 1.0 the best case for owning (busy around the clock)."""

    years: float = 3.0
    electricity_usd_per_kwh: float = 0.15
    utilization: float = 1.0

    def __post_init__(self) -> None:
        if not self.years > 0:
            raise ValueError(f"years must be > 0, got {self.years}")
        if not self.electricity_usd_per_kwh >= 0:
            raise ValueError(f"electricity price must be >= 0, got {self.electricity_usd_per_kwh}")
        if not 0 < self.utilization <= 1:
            raise ValueError(f"utilization must be in (0, 1], got {self.utilization}")


def rental_usd_per_hour(rental_price_usd_per_hour: float | None) -> float | None:
    """Rental is billed per hour the replica runs; the profile's figure is already per hour."""
    return rental_price_usd_per_hour


def ownership_usd_per_hour(
    purchase_usd: float | None, power_w: float | None, assumptions: OwnershipAssumptions
) -> float | None:
    """Cost of one serving hour of an owned device (formula in the module docstring).

    None when the purchase price is unknown. A missing power figure is also None: leaving energy
    out would understate the cost without saying so.
    """
    if purchase_usd is None or power_w is None:
        return None
    a = assumptions
    capital_usd_per_hour = purchase_usd / (a.years * HOURS_PER_YEAR * a.utilization)
    energy_usd_per_hour = power_w / 1000.0 * a.electricity_usd_per_kwh
    return capital_usd_per_hour + energy_usd_per_hour


def usd_per_million_output_tokens(usd_per_hour: float | None, output_tok_s: float | None) -> float | None:
    """Dollars per 1e6 output tokens for a cost rate and an output-token rate (both while serving)."""
    if usd_per_hour is None or output_tok_s is None or not output_tok_s > 0 or math.isnan(output_tok_s):
        return None
    return usd_per_hour / (output_tok_s * 3600.0) * 1e6


def replicas_needed(target_rps: float, max_rate_rps: float | None) -> int | None:
    """Replicas so that each one sees at most its sustainable rate: ceil(target / max_rate).

    Assumes the load balancer splits requests evenly (round robin over identical replicas). The
    1e-9 slack keeps a float ratio such as 50 / 25.000000000001 from rounding up to an extra
    replica.
    """
    if max_rate_rps is None or not max_rate_rps > 0:
        return None
    return max(1, math.ceil(target_rps / max_rate_rps - 1e-9))


@dataclass(frozen=True)
class DeploymentCost:
    """Costs of a deployment of `replicas` identical replicas serving `output_tok_s` in total."""

    replicas: int
    rental_usd_per_hour: float | None
    ownership_usd_per_hour: float | None
    rental_usd_per_million_output_tokens: float | None
    ownership_usd_per_million_output_tokens: float | None


def deployment_cost(
    *,
    replicas: int,
    output_tok_s: float,
    rental_price_usd_per_hour: float | None,
    purchase_usd: float | None,
    power_w: float | None,
    assumptions: OwnershipAssumptions,
) -> DeploymentCost:
    """Total hourly cost of `replicas` replicas and its price per million output tokens.

    `output_tok_s` is what the whole deployment produces (target requests/s x mean output tokens
    per request), so over-provisioning from rounding the replica count up is paid for.
    """
    rent = rental_usd_per_hour(rental_price_usd_per_hour)
    own = ownership_usd_per_hour(purchase_usd, power_w, assumptions)
    rent_total = None if rent is None else replicas * rent
    own_total = None if own is None else replicas * own
    return DeploymentCost(
        replicas=replicas,
        rental_usd_per_hour=rent_total,
        ownership_usd_per_hour=own_total,
        rental_usd_per_million_output_tokens=usd_per_million_output_tokens(rent_total, output_tok_s),
        ownership_usd_per_million_output_tokens=usd_per_million_output_tokens(own_total, output_tok_s),
    )
