/* merge2 (ABI v2): merges two streams, each sorted ascending on an integer key column, into one
 * sorted stream.
 *   key=k      the key column (INT64, INT32 or DATE32), named as in input 0
 * Both inputs have the same column types, matched by position (as UNION ALL does); the key is
 * at the same position in both; the output has input 0's column names. On equal keys input 0's
 * rows come first; NULL keys sort first.
 *
 * The disklet never copies or buffers input: it holds the current buffer of each input where
 * the host put it (input i's buffer stays in i's area until i's next buffer), asks for the input
 * whose buffer it used up (adisk_next_input), and emits rows while both inputs have rows left —
 * only then is the smaller head the smallest row still to come — or once the other input ended. */
#include "adisk2.h"

ADISK_SHAPE(2, 1);

#define MAX_PICKS 4096

static int32_t key_column;
static adisk_table head[2];   /* the current buffer of each input, in its input area */
static uint32_t next_row[2];  /* its next row to merge */
static int has_rows[2];       /* the current buffer has rows left */
static int ended[2];
static adisk_row picks[MAX_PICKS];
static uint8_t out_buf[256 * 1024] __attribute__((aligned(8)));
static char declaration[4096];

ADISK_DEFAULT_INPUT_AREAS

/* Both inputs' "_types.i" lists are the same text. */
static int same_types(const char *params, int32_t n) {
  char k0[32], k1[32];
  const char *t0, *t1;
  int32_t l0, l1;
  if (!adisk_param(params, n, adisk_input_key(k0, "_types", 0), &t0, &l0) || !adisk_param(params, n, adisk_input_key(k1, "_types", 1), &t1, &l1)) return 0;
  if (l0 != l1) return 0;
  for (int32_t i = 0; i < l0; i++)
    if (t0[i] != t1[i]) return 0;
  return 1;
}

ADISK_EXPORT("adisk_init") int32_t adisk_init(const char *params, int32_t n) {
  const char *v;
  int32_t len;
  if (!adisk_param(params, n, "key", &v, &len)) { adisk_log_str("merge2: needs key=COLUMN"); return ADISK_BAD_PARAM; }
  key_column = adisk_input_column(params, n, 0, v, len);
  if (key_column < 0) { adisk_log_str("merge2: the key is not a column of input 0"); return ADISK_BAD_PARAM; }
  if (!same_types(params, n)) { adisk_log_str("merge2: the inputs' column types differ"); return ADISK_BAD_INPUT; }
  return adisk_declare_like_input(0, params, n, 0, declaration, sizeof declaration);
}

/* Input 0 or 1 while its buffer is used up and it has not ended; otherwise either. */
ADISK_EXPORT("adisk_next_input") int32_t adisk_next_input(void) {
  for (int i = 0; i < 2; i++)
    if (!has_rows[i] && !ended[i]) return i;
  return ADISK_ANY_INPUT;
}

static int64_t key_of(int side) {
  const adisk_table *t = &head[side];
  const uint8_t *valid = adisk_col_valid(t, (uint32_t)key_column);
  uint32_t r = next_row[side];
  return valid && !valid[r] ? INT64_MIN : adisk_value_i64(t, (uint32_t)key_column, r);
}

/* The input holding the smallest row still to come, or -1 if that is not known yet (an input
 * that has not ended has no rows at hand) or nothing is left. */
static int smallest(void) {
  if ((!has_rows[0] && !ended[0]) || (!has_rows[1] && !ended[1])) return -1;
  if (!has_rows[0]) return has_rows[1] ? 1 : -1;
  if (!has_rows[1]) return 0;
  return key_of(1) < key_of(0) ? 1 : 0;
}

/* Emits every row whose place is known. The picks point into the input areas, which the host
 * rewrites only after this call returns (a head is replaced by adisk_process): every pick is
 * emitted before it does. */
static int32_t merge(void) {
  uint32_t n = 0;
  int side;
  while ((side = smallest()) >= 0) {
    picks[n].table = &head[side];
    picks[n].row = next_row[side];
    if (++next_row[side] == head[side].rows) has_rows[side] = 0;
    if (++n == MAX_PICKS) {
      int32_t rc = adisk_emit_rows(0, out_buf, sizeof out_buf, picks, n);
      if (rc != ADISK_OK) return rc;
      n = 0;
    }
  }
  return adisk_emit_rows(0, out_buf, sizeof out_buf, picks, n);
}

ADISK_EXPORT("adisk_process") int32_t adisk_process(int32_t input, const uint8_t *buf, int32_t len, int64_t position) {
  (void)position;
  if (input < 0 || input > 1 || has_rows[input]) return ADISK_BAD_INPUT;
  if (adisk_table_open(&head[input], buf, len) != ADISK_OK || (uint32_t)key_column >= head[input].columns) return ADISK_BAD_INPUT;
  uint8_t ty = adisk_col_type(&head[input], (uint32_t)key_column);
  if (ty != ADISK_INT64 && ty != ADISK_INT32 && ty != ADISK_DATE32) return ADISK_BAD_INPUT;
  next_row[input] = 0;
  has_rows[input] = head[input].rows > 0;
  return merge();
}

ADISK_EXPORT("adisk_input_ended") int32_t adisk_input_ended(int32_t input) {
  if (input < 0 || input > 1) return ADISK_BAD_INPUT;
  ended[input] = 1;
  return merge();
}

ADISK_EXPORT("adisk_finish") int32_t adisk_finish(void) {
  ended[0] = ended[1] = 1;
  return merge();
}
