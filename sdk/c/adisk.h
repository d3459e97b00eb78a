/* adisk.h: write ActiveDisk user disklets in C (ABI v1, docs/disklet-abi.md). For ABI v2
 * (several inputs and output ports) include adisk2.h instead: it includes this file with the
 * v2 imports in place of the v1 ones.
 *
 * Build with sdk/c/build.sh (Debian clang + lld, --target=wasm32, no libc). A disklet defines
 * the four exports below; ADISK_DEFAULT_INPUT_AREA defines adisk_input_area for you.
 *
 *   int32_t adisk_input_area(int32_t capacity)   reserve `capacity` bytes, return their address
 *   int32_t adisk_init(int32_t params, int32_t len)   "key=value\n" lines; declare the output
 *   int32_t adisk_process(int32_t buf, int32_t len, int64_t position)   one input buffer
 *   int32_t adisk_finish(void)                   end of the input
 *
 * Return ADISK_OK (or ADISK_DONE from process: no more input needed) or a negative code.
 * The disklet cannot allocate beyond its grant, open files, or choose its streams.
 */
#ifndef ADISK_H
#define ADISK_H

#include <stddef.h>
#include <stdint.h>

#ifndef ADISK_ABI_MODULE
#define ADISK_ABI_MODULE "adisk_v1"
#endif
#define ADISK_IMPORT(n) __attribute__((import_module(ADISK_ABI_MODULE), import_name(n)))
#define ADISK_EXPORT(n) __attribute__((export_name(n)))

/* Return codes. */
#define ADISK_OK 0
#define ADISK_DONE 1
#define ADISK_BAD_PARAM (-1)
#define ADISK_BAD_INPUT (-2)
#define ADISK_NO_SCRATCH (-3)
#define ADISK_FAILED (-4)
#define ADISK_BAD_BUFFER (-5)

/* ADT1 column types. */
#define ADISK_INT32 1
#define ADISK_INT64 2
#define ADISK_FLOAT64 3
#define ADISK_DECIMAL64 4
#define ADISK_DATE32 5
#define ADISK_UTF8 6
#define ADISK_BINARY 7
#define ADISK_BOOL 8

/* Imports. emit: one output record (raw bytes, or an ADT1 table once an output is declared).
 * skip: ask the input stream to skip [start, end) (rows for tables, bytes for files).
 * declare_output (init only): "name:type,..." with types int32 int64 float64 date32 utf8 binary bool. */
ADISK_IMPORT("log") void adisk_log(const char *ptr, int32_t len);
#ifndef ADISK_V2
ADISK_IMPORT("emit") int32_t adisk_emit(const void *ptr, int32_t len);
ADISK_IMPORT("skip") void adisk_skip(int64_t start, int64_t end);
ADISK_IMPORT("declare_output") int32_t adisk_declare_output(const char *spec, int32_t len);
#endif

/* The compiler may call these; bulk-memory instructions (-mbulk-memory) do the work. */
__attribute__((weak)) void *memcpy(void *d, const void *s, size_t n) { return __builtin_memcpy(d, s, n); }
__attribute__((weak)) void *memset(void *d, int c, size_t n) { return __builtin_memset(d, c, n); }

/* The parameters (like every input buffer) live in the input area, which the next call
 * overwrites: keep what you need. Copies them into `dst`; returns the copy, or NULL if too long. */
static inline const char *adisk_keep_params(char *dst, int32_t capacity, const char *params, int32_t n) {
  if (n > capacity) return NULL;
  __builtin_memcpy(dst, params, (size_t)n);
  return dst;
}

static inline size_t adisk_strlen(const char *s) { size_t n = 0; while (s[n]) n++; return n; }
static inline void adisk_log_str(const char *s) { adisk_log(s, (int32_t)adisk_strlen(s)); }
#ifndef ADISK_V2
static inline int32_t adisk_declare(const char *spec) { return adisk_declare_output(spec, (int32_t)adisk_strlen(spec)); }
#endif

/* Grows linear memory by whole pages; returns the new region or NULL (grant exhausted). */
static inline void *adisk_grow(uint32_t bytes) {
  int32_t old = __builtin_wasm_memory_grow(0, (bytes + 65535u) / 65536u);
  return old < 0 ? NULL : (void *)(uintptr_t)((uint32_t)old * 65536u);
}

#ifndef ADISK_V2
#define ADISK_DEFAULT_INPUT_AREA \
  ADISK_EXPORT("adisk_input_area") int32_t adisk_input_area(int32_t capacity) { \
    return (int32_t)(uintptr_t)adisk_grow((uint32_t)capacity); }
#endif

/* ---- parameters: "key=value\n" lines -------------------------------------------------- */

/* Finds `key`; points value at its text and sets len. Returns 1 if present. */
static inline int adisk_param(const char *p, int32_t n, const char *key, const char **value, int32_t *len) {
  size_t k = adisk_strlen(key);
  int32_t i = 0;
  while (i < n) {
    int32_t e = i;
    while (e < n && p[e] != '\n') e++;
    if ((size_t)(e - i) > k && p[i + k] == '=') {
      size_t j = 0;
      while (j < k && p[i + j] == key[j]) j++;
      if (j == k) { *value = p + i + k + 1; *len = e - i - (int32_t)k - 1; return 1; }
    }
    i = e + 1;
  }
  return 0;
}

static inline int adisk_is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

/* Parses an integer or decimal literal ("-12", "0.05") scaled by 10^scale (0.05 at scale 2 -> 5).
 * Returns characters consumed, 0 on error. */
static inline int32_t adisk_parse_scaled(const char *s, int32_t n, int scale, int64_t *out) {
  int32_t i = 0; int neg = 0; int64_t v = 0; int frac = -1; int digits = 0;
  while (i < n && adisk_is_space(s[i])) i++;
  if (i < n && (s[i] == '-' || s[i] == '+')) { neg = s[i] == '-'; i++; }
  for (; i < n; i++) {
    if (s[i] == '.' && frac < 0) { frac = 0; continue; }
    if (s[i] < '0' || s[i] > '9') break;
    if (frac >= 0) { if (frac >= scale) continue; frac++; }
    v = v * 10 + (s[i] - '0'); digits++;
  }
  if (!digits) return 0;
  for (int f = frac < 0 ? 0 : frac; f < scale; f++) v *= 10;
  *out = neg ? -v : v;
  return i;
}

/* Days since 1970-01-01 of "YYYY-MM-DD" (proleptic Gregorian). Returns characters consumed or 0. */
static inline int32_t adisk_parse_date(const char *s, int32_t n, int64_t *days) {
  int32_t i = 0;
  while (i < n && adisk_is_space(s[i])) i++;
  if (n - i < 10 || s[i + 4] != '-' || s[i + 7] != '-') return 0;
  int y = 0, m = 0, d = 0;
  for (int k = 0; k < 4; k++) y = y * 10 + (s[i + k] - '0');
  m = (s[i + 5] - '0') * 10 + (s[i + 6] - '0');
  d = (s[i + 8] - '0') * 10 + (s[i + 9] - '0');
  y -= m <= 2;
  int era = (y >= 0 ? y : y - 399) / 400;
  int yoe = y - era * 400;
  int doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  *days = (int64_t)era * 146097 + doe - 719468;
  return i + 10;
}

/* ---- ADT1 tables ---------------------------------------------------------------------- */

typedef struct {
  const uint8_t *base;
  uint32_t rows;
  uint32_t columns;
} adisk_table;

static inline uint32_t adisk_u32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }

/* Opens an ADT1 buffer handed to adisk_process. Returns ADISK_OK or ADISK_BAD_INPUT. */
static inline int32_t adisk_table_open(adisk_table *t, const void *buf, int32_t len) {
  const uint8_t *b = (const uint8_t *)buf;
  if (len < 16 || adisk_u32(b) != 0x31544441u) return ADISK_BAD_INPUT;
  t->base = b; t->rows = adisk_u32(b + 4); t->columns = adisk_u32(b + 8);
  return ADISK_OK;
}
static inline const uint8_t *adisk_desc(const adisk_table *t, uint32_t c) { return t->base + 16 + 16 * c; }
static inline uint8_t adisk_col_type(const adisk_table *t, uint32_t c) { return adisk_desc(t, c)[0]; }
static inline int adisk_col_scale(const adisk_table *t, uint32_t c) { return (int8_t)adisk_desc(t, c)[1]; }
static inline const void *adisk_col_data(const adisk_table *t, uint32_t c) { return t->base + adisk_u32(adisk_desc(t, c) + 4); }
/* One byte per row, 1 = valid; NULL when the column has no nulls. */
static inline const uint8_t *adisk_col_valid(const adisk_table *t, uint32_t c) {
  uint32_t o = adisk_u32(adisk_desc(t, c) + 8); return o ? t->base + o : NULL; }
static inline const int32_t *adisk_col_i32(const adisk_table *t, uint32_t c) { return (const int32_t *)adisk_col_data(t, c); }
static inline const int64_t *adisk_col_i64(const adisk_table *t, uint32_t c) { return (const int64_t *)adisk_col_data(t, c); }
static inline const double *adisk_col_f64(const adisk_table *t, uint32_t c) { return (const double *)adisk_col_data(t, c); }
/* String/binary value of row r. */
static inline const uint8_t *adisk_col_bytes(const adisk_table *t, uint32_t c, uint32_t r, uint32_t *len) {
  const uint32_t *off = (const uint32_t *)adisk_col_data(t, c);
  *len = off[r + 1] - off[r];
  return t->base + adisk_u32(adisk_desc(t, c) + 12) + off[r];
}
/* Any integer-like column (INT32, DATE32, BOOL, INT64, DECIMAL64 unscaled) as int64. */
static inline int64_t adisk_value_i64(const adisk_table *t, uint32_t c, uint32_t r) {
  switch (adisk_col_type(t, c)) {
    case ADISK_INT32: case ADISK_DATE32: return adisk_col_i32(t, c)[r];
    case ADISK_BOOL: return ((const uint8_t *)adisk_col_data(t, c))[r];
    case ADISK_FLOAT64: return (int64_t)adisk_col_f64(t, c)[r];
    default: return adisk_col_i64(t, c)[r];
  }
}

/* Index of `name` in the comma-separated list of parameter `key`, or -1. */
static inline int32_t adisk_list_index(const char *params, int32_t n, const char *key, const char *name, int32_t name_len) {
  const char *v; int32_t len;
  if (!adisk_param(params, n, key, &v, &len)) return -1;
  int32_t idx = 0, i = 0;
  while (i <= len) {
    int32_t e = i;
    while (e < len && v[e] != ',') e++;
    if (e - i == name_len) {
      int32_t j = 0;
      while (j < name_len && v[i + j] == name[j]) j++;
      if (j == name_len) return idx;
    }
    idx++; i = e + 1;
  }
  return -1;
}

/* Column index of `name` in the "_columns" parameter (comma-separated input column names), or -1. */
static inline int32_t adisk_column_index(const char *params, int32_t n, const char *name, int32_t name_len) {
  return adisk_list_index(params, n, "_columns", name, name_len);
}

/* Builds `rows` rows of `ncols` INT64 columns (no nulls) as one ADT1 buffer in `scratch`
 * (16 + 16*ncols + 8*ncols*rows bytes); returns its length. */
static inline int32_t adisk_i64_table(uint8_t *scratch, const int64_t *const *cols, uint32_t ncols, uint32_t rows) {
  uint32_t *h = (uint32_t *)scratch;
  uint32_t data = 16 + 16 * ncols;
  h[0] = 0x31544441u; h[1] = rows; h[2] = ncols; h[3] = data + 8 * ncols * rows;
  for (uint32_t c = 0; c < ncols; c++) {
    uint32_t *d = (uint32_t *)(scratch + 16 + 16 * c);
    d[0] = ADISK_INT64; d[1] = data + 8 * rows * c; d[2] = 0; d[3] = 0;
    __builtin_memcpy(scratch + d[1], cols[c], 8 * rows);
  }
  return (int32_t)h[3];
}

#ifndef ADISK_V2
/* Emits `rows` rows of `ncols` INT64 columns (no nulls) as one ADT1 buffer built in `scratch`
 * (16 + 16*ncols + 8*ncols*rows bytes). The output must have been declared with matching types. */
static inline int32_t adisk_emit_i64_table(uint8_t *scratch, const int64_t *const *cols, uint32_t ncols, uint32_t rows) {
  return adisk_emit(scratch, adisk_i64_table(scratch, cols, ncols, rows));
}
#endif

#endif
