/* count_if: counts (mode=count) or selects (mode=select: emits the stream positions of) the rows
 * matching every condition of `where`, e.g.
 *   where=l_shipdate >= 1994-01-01; l_discount >= 0.05; l_quantity < 24
 * Values are integers, decimals (scaled to the column's scale) or dates (DATE32 columns).
 * Output: count:int64 (one row at finish), or row:int64 (matching positions). */
#include "adisk.h"

#define MAX_CONDS 16
#define BLOCK 4096

enum { LT, LE, GT, GE, EQ, NE };
typedef struct { int32_t column; int op; const char *text; int32_t text_len; int64_t ivalue; double fvalue; } cond;

static cond conds[MAX_CONDS];
static int nconds;
static int resolved;
static int select_mode;
static int64_t count;
static uint8_t mask[BLOCK];
static int64_t positions[BLOCK];
static uint8_t out_buf[16 + 16 + 8 * BLOCK];

ADISK_DEFAULT_INPUT_AREA

static int32_t parse_where(const char *params, int32_t n, const char *w, int32_t len) {
  int32_t i = 0;
  while (i < len) {
    int32_t e = i;
    while (e < len && w[e] != ';') e++;
    int32_t a = i;
    while (a < e && adisk_is_space(w[a])) a++;
    int32_t b = a;
    while (b < e && !adisk_is_space(w[b]) && w[b] != '<' && w[b] != '>' && w[b] != '=' && w[b] != '!') b++;
    if (a == b) { i = e + 1; continue; }
    if (nconds == MAX_CONDS) return ADISK_BAD_PARAM;
    cond *c = &conds[nconds++];
    c->column = adisk_column_index(params, n, w + a, b - a);
    if (c->column < 0) { adisk_log_str("count_if: unknown column in where"); return ADISK_BAD_PARAM; }
    while (b < e && adisk_is_space(w[b])) b++;
    if (b + 1 < e && w[b] == '<' && w[b + 1] == '=') { c->op = LE; b += 2; }
    else if (b + 1 < e && w[b] == '>' && w[b + 1] == '=') { c->op = GE; b += 2; }
    else if (b + 1 < e && w[b] == '!' && w[b + 1] == '=') { c->op = NE; b += 2; }
    else if (b < e && w[b] == '<') { c->op = LT; b += 1; }
    else if (b < e && w[b] == '>') { c->op = GT; b += 1; }
    else if (b < e && w[b] == '=') { c->op = EQ; b += 1; }
    else return ADISK_BAD_PARAM;
    c->text = w + b; c->text_len = e - b;
    i = e + 1;
  }
  return ADISK_OK;
}

static char kept[8192];

ADISK_EXPORT("adisk_init") int32_t adisk_init(const char *params, int32_t n) {
  params = adisk_keep_params(kept, sizeof kept, params, n); /* conditions point into them later */
  if (!params) return ADISK_BAD_PARAM;
  const char *v; int32_t len;
  if (adisk_param(params, n, "mode", &v, &len)) {
    if (len == 6 && v[0] == 's') select_mode = 1;
    else if (!(len == 5 && v[0] == 'c')) return ADISK_BAD_PARAM;
  }
  if (adisk_param(params, n, "where", &v, &len)) {
    int32_t rc = parse_where(params, n, v, len);
    if (rc != ADISK_OK) return rc;
  }
  return adisk_declare(select_mode ? "row:int64" : "count:int64");
}

/* Conditions get their values once the column types are known (first buffer). */
static int32_t resolve(const adisk_table *t) {
  for (int k = 0; k < nconds; k++) {
    cond *c = &conds[k];
    if ((uint32_t)c->column >= t->columns) return ADISK_BAD_INPUT;
    int ty = adisk_col_type(t, c->column);
    int32_t used;
    if (ty == ADISK_DATE32) used = adisk_parse_date(c->text, c->text_len, &c->ivalue);
    else if (ty == ADISK_FLOAT64) { used = adisk_parse_scaled(c->text, c->text_len, 6, &c->ivalue); c->fvalue = (double)c->ivalue / 1e6; }
    else if (ty == ADISK_INT32 || ty == ADISK_INT64 || ty == ADISK_DECIMAL64) used = adisk_parse_scaled(c->text, c->text_len, ty == ADISK_DECIMAL64 ? adisk_col_scale(t, c->column) : 0, &c->ivalue);
    else return ADISK_BAD_INPUT;
    if (!used) return ADISK_BAD_PARAM;
  }
  resolved = 1;
  return ADISK_OK;
}

#define APPLY(T, values, v)                                                  \
  switch (c->op) {                                                           \
    case LT: for (uint32_t i = 0; i < m; i++) mask[i] &= values[i] < v; break;  \
    case LE: for (uint32_t i = 0; i < m; i++) mask[i] &= values[i] <= v; break; \
    case GT: for (uint32_t i = 0; i < m; i++) mask[i] &= values[i] > v; break;  \
    case GE: for (uint32_t i = 0; i < m; i++) mask[i] &= values[i] >= v; break; \
    case EQ: for (uint32_t i = 0; i < m; i++) mask[i] &= values[i] == v; break; \
    default: for (uint32_t i = 0; i < m; i++) mask[i] &= values[i] != v; break; \
  }

ADISK_EXPORT("adisk_process") int32_t adisk_process(const uint8_t *buf, int32_t len, int64_t position) {
  adisk_table t;
  if (adisk_table_open(&t, buf, len) != ADISK_OK) return ADISK_BAD_INPUT;
  if (!resolved) { int32_t rc = resolve(&t); if (rc != ADISK_OK) return rc; }
  for (uint32_t start = 0; start < t.rows; start += BLOCK) {
    uint32_t m = t.rows - start < BLOCK ? t.rows - start : BLOCK;
    for (uint32_t i = 0; i < m; i++) mask[i] = 1;
    for (int k = 0; k < nconds; k++) {
      cond *c = &conds[k];
      int ty = adisk_col_type(&t, c->column);
      if (ty == ADISK_INT32 || ty == ADISK_DATE32) { const int32_t *x = adisk_col_i32(&t, c->column) + start; int32_t v = (int32_t)c->ivalue; APPLY(int32_t, x, v) }
      else if (ty == ADISK_FLOAT64) { const double *x = adisk_col_f64(&t, c->column) + start; double v = c->fvalue; APPLY(double, x, v) }
      else { const int64_t *x = adisk_col_i64(&t, c->column) + start; int64_t v = c->ivalue; APPLY(int64_t, x, v) }
      const uint8_t *valid = adisk_col_valid(&t, c->column);
      if (valid) for (uint32_t i = 0; i < m; i++) mask[i] &= valid[start + i];
    }
    if (!select_mode) {
      uint32_t s = 0;
      for (uint32_t i = 0; i < m; i++) s += mask[i];
      count += s;
    } else {
      uint32_t k = 0;
      for (uint32_t i = 0; i < m; i++) if (mask[i]) positions[k++] = position + start + i;
      if (k) {
        const int64_t *cols[1] = { positions };
        if (adisk_emit_i64_table(out_buf, cols, 1, k) != ADISK_OK) return ADISK_FAILED;
      }
    }
  }
  return ADISK_OK;
}

ADISK_EXPORT("adisk_finish") int32_t adisk_finish(void) {
  if (select_mode) return ADISK_OK;
  const int64_t *cols[1] = { &count };
  return adisk_emit_i64_table(out_buf, cols, 1, 1);
}
