/* histogram: counts the values of one integer-like column in `bins` equal-width bins over
 * [min, max): bin = (v - min) * bins / (max - min); values outside are not counted.
 *   column=l_quantity bins=10 min=1 max=51   (decimals are scaled to the column's scale)
 * Output: bin:int64, count:int64 — every bin, emitted at finish. */
#include "adisk.h"

#define MAX_BINS 4096

static int32_t column;
static int64_t bins, lo, hi;
static const char *min_text, *max_text;
static int32_t min_len, max_len;
static int resolved;
static int64_t counts[MAX_BINS];
static int64_t bin_ids[MAX_BINS];
static uint8_t out_buf[16 + 32 + 16 * MAX_BINS];

ADISK_DEFAULT_INPUT_AREA

static char kept[8192];

ADISK_EXPORT("adisk_init") int32_t adisk_init(const char *params, int32_t n) {
  params = adisk_keep_params(kept, sizeof kept, params, n); /* conditions point into them later */
  if (!params) return ADISK_BAD_PARAM;
  const char *v; int32_t len;
  if (!adisk_param(params, n, "column", &v, &len)) return ADISK_BAD_PARAM;
  column = adisk_column_index(params, n, v, len);
  if (column < 0) return ADISK_BAD_PARAM;
  if (!adisk_param(params, n, "bins", &v, &len) || !adisk_parse_scaled(v, len, 0, &bins) || bins < 1 || bins > MAX_BINS) return ADISK_BAD_PARAM;
  if (!adisk_param(params, n, "min", &min_text, &min_len) || !adisk_param(params, n, "max", &max_text, &max_len)) return ADISK_BAD_PARAM;
  return adisk_declare("bin:int64,count:int64");
}

ADISK_EXPORT("adisk_process") int32_t adisk_process(const uint8_t *buf, int32_t len, int64_t position) {
  (void)position;
  adisk_table t;
  if (adisk_table_open(&t, buf, len) != ADISK_OK || (uint32_t)column >= t.columns) return ADISK_BAD_INPUT;
  int ty = adisk_col_type(&t, column);
  if (!resolved) {
    int scale = ty == ADISK_DECIMAL64 ? adisk_col_scale(&t, column) : 0;
    int ok = ty == ADISK_DATE32 ? adisk_parse_date(min_text, min_len, &lo) && adisk_parse_date(max_text, max_len, &hi)
                                : adisk_parse_scaled(min_text, min_len, scale, &lo) && adisk_parse_scaled(max_text, max_len, scale, &hi);
    if (!ok || hi <= lo) return ADISK_BAD_PARAM;
    resolved = 1;
  }
  const uint8_t *valid = adisk_col_valid(&t, column);
  int64_t width = hi - lo;
  if (ty == ADISK_INT64 || ty == ADISK_DECIMAL64) {
    const int64_t *x = adisk_col_i64(&t, column);
    for (uint32_t i = 0; i < t.rows; i++) {
      int64_t v = x[i];
      if ((valid && !valid[i]) || v < lo || v >= hi) continue;
      counts[(v - lo) * bins / width]++;
    }
  } else if (ty == ADISK_INT32 || ty == ADISK_DATE32) {
    const int32_t *x = adisk_col_i32(&t, column);
    for (uint32_t i = 0; i < t.rows; i++) {
      int64_t v = x[i];
      if ((valid && !valid[i]) || v < lo || v >= hi) continue;
      counts[(v - lo) * bins / width]++;
    }
  } else {
    return ADISK_BAD_INPUT;
  }
  return ADISK_OK;
}

ADISK_EXPORT("adisk_finish") int32_t adisk_finish(void) {
  for (int64_t b = 0; b < bins; b++) bin_ids[b] = b;
  const int64_t *cols[2] = { bin_ids, counts };
  return adisk_emit_i64_table(out_buf, cols, 2, (uint32_t)bins);
}
