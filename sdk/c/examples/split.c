/* split (ABI v2): routes each row of its input to one of two output ports by an integer column:
 * even values to port 0, odd values to port 1 (NULLs to port 0).
 *   key=k      the column (INT64, INT32 or DATE32)
 * Both ports carry the input's columns. */
#include "adisk2.h"

ADISK_SHAPE(1, 2);

#define MAX_ROWS 8192

static int32_t key_column;
static adisk_row rows[2][MAX_ROWS];
static uint8_t out_buf[256 * 1024] __attribute__((aligned(8)));
static char declaration[4096];

ADISK_DEFAULT_INPUT_AREAS

ADISK_EXPORT("adisk_init") int32_t adisk_init(const char *params, int32_t n) {
  const char *v;
  int32_t len;
  if (!adisk_param(params, n, "key", &v, &len)) return ADISK_BAD_PARAM;
  key_column = adisk_input_column(params, n, 0, v, len);
  if (key_column < 0) return ADISK_BAD_PARAM;
  for (int32_t port = 0; port < 2; port++) {
    int32_t rc = adisk_declare_like_input(port, params, n, 0, declaration, sizeof declaration);
    if (rc != ADISK_OK) return rc;
  }
  return ADISK_OK;
}

ADISK_EXPORT("adisk_next_input") int32_t adisk_next_input(void) { return ADISK_ANY_INPUT; }

ADISK_EXPORT("adisk_input_ended") int32_t adisk_input_ended(int32_t input) {
  (void)input;
  return ADISK_OK;
}

/* Emits the rows collected for both ports. */
static int32_t flush(uint32_t count[2]) {
  for (int32_t port = 0; port < 2; port++) {
    int32_t rc = adisk_emit_rows(port, out_buf, sizeof out_buf, rows[port], count[port]);
    if (rc != ADISK_OK) return rc;
    count[port] = 0;
  }
  return ADISK_OK;
}

ADISK_EXPORT("adisk_process") int32_t adisk_process(int32_t input, const uint8_t *buf, int32_t len, int64_t position) {
  (void)input; (void)position;
  adisk_table t;
  if (adisk_table_open(&t, buf, len) != ADISK_OK || (uint32_t)key_column >= t.columns) return ADISK_BAD_INPUT;
  uint8_t ty = adisk_col_type(&t, (uint32_t)key_column);
  if (ty != ADISK_INT64 && ty != ADISK_INT32 && ty != ADISK_DATE32) return ADISK_BAD_INPUT;
  const uint8_t *valid = adisk_col_valid(&t, (uint32_t)key_column);
  uint32_t count[2] = { 0, 0 };
  for (uint32_t r = 0; r < t.rows; r++) {
    int odd = !(valid && !valid[r]) && adisk_value_i64(&t, (uint32_t)key_column, r) % 2 != 0;
    rows[odd][count[odd]].table = &t;
    rows[odd][count[odd]].row = r;
    if (++count[odd] == MAX_ROWS) {
      int32_t rc = flush(count);
      if (rc != ADISK_OK) return rc;
    }
  }
  return flush(count);
}

ADISK_EXPORT("adisk_finish") int32_t adisk_finish(void) { return ADISK_OK; }
