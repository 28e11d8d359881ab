// Small statistics helpers: no dependency, deterministic.

/** The p-th percentile (0-100) of already sorted numbers, linear interpolation between ranks. */
export function percentile(sorted, p) {
  if (sorted.length === 0) return Number.NaN;
  if (sorted.length === 1) return sorted[0];
  const rank = (p / 100) * (sorted.length - 1);
  const lo = Math.floor(rank);
  const hi = Math.ceil(rank);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - lo);
}

export function median(values) {
  return percentile([...values].sort((a, b) => a - b), 50);
}

export function summarize(values) {
  const sorted = [...values].filter((v) => Number.isFinite(v)).sort((a, b) => a - b);
  return {
    median: percentile(sorted, 50),
    min: sorted.length ? sorted[0] : Number.NaN,
    max: sorted.length ? sorted[sorted.length - 1] : Number.NaN,
    n: sorted.length,
  };
}

export function sortedCopy(values) {
  return [...values].sort((a, b) => a - b);
}
