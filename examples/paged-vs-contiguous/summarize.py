"""How many users each KV allocator serves at once, from the sweep's results.csv.

"Fit" = every one of the N users has a sequence in the running batch at some point together
(peak batch size == N) and no request was preempted for lack of KV memory. Prints the per-run table, then per allocator the largest N that fits, its
peak batch over all loads, and where it started preempting.
"""

import sys

import pandas as pd

df = pd.read_csv(sys.argv[1] if len(sys.argv) > 1 else "out/results.csv")
df = df[df["status"] == "ok"].sort_values(["kv_allocator", "concurrency"], ascending=[False, True])
cols = ["kv_allocator", "concurrency", "batch_size_mean", "batch_size_max", "kv_peak_reserved_fraction",
        "kv_preemptions", "ttft_s_p90", "tpot_s_p90", "throughput_output_tok_s"]
print(df[cols].to_string(index=False, float_format=lambda v: f"{v:.3g}"))
print()
fit = {}
for kv, g in df.groupby("kv_allocator", sort=False):
    all_in = g[(g["batch_size_max"] >= g["concurrency"]) & (g["kv_preemptions"] == 0)]
    fit[kv] = int(all_in["concurrency"].max()) if not all_in.empty else 0
    preempting = g[g["kv_preemptions"] > 0]
    first_preempt = f"first preemptions at {int(preempting['concurrency'].min())} users" if not preempting.empty else "no preemptions"
    best = g.loc[g["throughput_output_tok_s"].idxmax()]
    print(f"{kv:>10}: all users in the batch, no preemption, up to {fit[kv]} users; peak batch {int(g['batch_size_max'].max())}; "
          f"{first_preempt}; best throughput {best['throughput_output_tok_s']:.0f} tok/s at {int(best['concurrency'])} users")
if fit.get("contiguous"):
    print(f"\npaged fits {fit['paged'] / fit['contiguous']:.2f}x the users of contiguous on this grid "
          f"({fit['paged']} vs {fit['contiguous']}).")
