"""CI performance regression checks: named metrics per engine, baselines, comparisons with
thresholds, budgets, a history database and a pytest plugin (docs/ci.md)."""
