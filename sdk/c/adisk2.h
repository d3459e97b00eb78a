/* adisk2.h: write ActiveDisk user disklets in C under ABI v2 (docs/disklet-abi.md, "ABI v2"):
 * several inputs, several output ports. It includes adisk.h (parameters, ADT1 accessors) with
 * the v2 imports (module "adisk_v2") in place of the v1 ones.
 *
 * A v2 disklet declares its shape once, at file scope, and defines six exports:
 *
 *   ADISK_SHAPE(2, 1);     2 inputs, 1 output port (a custom section "adisk_v2", read at install)
 *   int32_t adisk_input_area(int32_t input, int32_t capacity)   an area per input; see
 *                                                               ADISK_DEFAULT_INPUT_AREAS
 *   int32_t adisk_init(int32_t params, int32_t len)     "key=value\n" lines, plus _inputs, _outputs
 *                                                       and per input i: _input.i, _columns.i, _types.i
 *   int32_t adisk_next_input(void)                      the input wanted next: 0..N-1 or ADISK_ANY_INPUT
 *   int32_t adisk_process(int32_t input, int32_t buf, int32_t len, int64_t position)
 *   int32_t adisk_input_ended(int32_t input)            input delivered its last buffer
 *   int32_t adisk_finish(void)                          every input ended (or a call returned ADISK_DONE)
 *
 * A buffer of input i stays in i's area, untouched, until the next adisk_process call for
 * input i: a disklet may keep pointers into it while it is handed other inputs' buffers (a merge
 * holds one buffer per input without copying). adisk_next_input is asked after init and after
 * every call; the host hands the disklet nothing else while the input it wants has no buffer.
 */
#ifndef ADISK2_H
#define ADISK2_H

#define ADISK_V2 1
#define ADISK_ABI_MODULE "adisk_v2"
#include "adisk.h"

/* adisk_next_input: any input will do. */
#define ADISK_ANY_INPUT (-1)
/* emit/declare_output: no such output port. */
#define ADISK_BAD_PORT (-6)

/* The module's shape: `inputs` inputs (1-16), `outputs` output ports (1-64). Once, at file scope. */
#define ADISK_SHAPE(inputs, outputs) \
  __asm__(".section .custom_section.adisk_v2,\"\",@\n.ascii \"inputs=" #inputs " outputs=" #outputs "\"\n.text\n")

/* Imports. emit: one output record on `port` (raw bytes, or an ADT1 table once that port's output
 * is declared); returns ADISK_OK, ADISK_BAD_BUFFER or ADISK_BAD_PORT.
 * skip: ask input `input` to skip [start, end) (advisory; only tables and files skip).
 * declare_output (init only): port's schema "name:type,...", types int32 int64 float64 date32
 * utf8 binary bool decimal64(S); a port without one carries raw records (bytes: Binary). */
ADISK_IMPORT("emit") int32_t adisk_emit(int32_t port, const void *ptr, int32_t len);
ADISK_IMPORT("skip") void adisk_skip(int32_t input, int64_t start, int64_t end);
ADISK_IMPORT("declare_output") int32_t adisk_declare_output(int32_t port, const char *spec, int32_t len);

static inline int32_t adisk_declare(int32_t port, const char *spec) { return adisk_declare_output(port, spec, (int32_t)adisk_strlen(spec)); }

/* adisk_input_area growing memory by one area per input. */
#define ADISK_DEFAULT_INPUT_AREAS \
  ADISK_EXPORT("adisk_input_area") int32_t adisk_input_area(int32_t input, int32_t capacity) { \
    (void)input; return (int32_t)(uintptr_t)adisk_grow((uint32_t)capacity); }

/* Writes the parameter name "<base>.<input>" (e.g. "_columns.1") into `key` (32 bytes; `base`
 * at most 19 characters) and returns it. */
static inline const char *adisk_input_key(char *key, const char *base, int32_t input) {
  size_t n = adisk_strlen(base);
  char digits[12];
  int d = 0;
  uint32_t v = (uint32_t)input;
  __builtin_memcpy(key, base, n);
  key[n++] = '.';
  do { digits[d++] = (char)('0' + v % 10); v /= 10; } while (v);
  while (d) key[n++] = digits[--d];
  key[n] = 0;
  return key;
}

/* Column index of `name` among input `input`'s columns ("_columns.<input>"), or -1. */
static inline int32_t adisk_input_column(const char *params, int32_t n, int32_t input, const char *name, int32_t name_len) {
  char key[32];
  return adisk_list_index(params, n, adisk_input_key(key, "_columns", input), name, name_len);
}

/* Declares output `port` with the column names and types of table input `input` ("_columns.i",
 * "_types.i"), writing the declaration into `buf` (`cap` bytes). */
static inline int32_t adisk_declare_like_input(int32_t port, const char *params, int32_t n, int32_t input, char *buf, int32_t cap) {
  char key[32];
  const char *names, *types;
  int32_t nl, tl, o = 0, a = 0, b = 0;
  if (!adisk_param(params, n, adisk_input_key(key, "_columns", input), &names, &nl)) return ADISK_BAD_INPUT;
  if (!adisk_param(params, n, adisk_input_key(key, "_types", input), &types, &tl)) return ADISK_BAD_INPUT;
  while (a <= nl && b <= tl) {
    int32_t ea = a, eb = b;
    while (ea < nl && names[ea] != ',') ea++;
    while (eb < tl && types[eb] != ',') eb++;
    if (o + (ea - a) + (eb - b) + 2 > cap) return ADISK_NO_SCRATCH;
    if (o) buf[o++] = ',';
    __builtin_memcpy(buf + o, names + a, (size_t)(ea - a)); o += ea - a;
    buf[o++] = ':';
    __builtin_memcpy(buf + o, types + b, (size_t)(eb - b)); o += eb - b;
    a = ea + 1; b = eb + 1;
  }
  if (a <= nl || b <= tl) return ADISK_BAD_INPUT; /* as many names as types */
  return adisk_declare_output(port, buf, o);
}

/* ---- building ADT1 tables from rows of input tables ------------------------------------ */

/* One row of an ADT1 table handed to adisk_process. */
typedef struct {
  const adisk_table *table;
  uint32_t row;
} adisk_row;

static inline uint32_t adisk_align8(uint32_t n) { return (n + 7u) & ~7u; }
static inline int adisk_is_var(uint8_t ty) { return ty == ADISK_UTF8 || ty == ADISK_BINARY; }
static inline uint32_t adisk_type_width(uint8_t ty) {
  switch (ty) {
    case ADISK_INT64: case ADISK_FLOAT64: case ADISK_DECIMAL64: return 8;
    case ADISK_BOOL: return 1;
    default: return 4; /* INT32, DATE32, and the u32 offsets of UTF8/BINARY */
  }
}
static inline void adisk_put_u32(uint8_t *p, uint32_t v) { __builtin_memcpy(p, &v, 4); }

/* Lays out (and, if `write`, copies) column `c` of `rows` starting at offset `at` of `out`:
 * values or offsets, validity if any row's table has nulls in it, then the bytes of UTF8/BINARY
 * values. Returns the offset after it. */
static inline uint32_t adisk_gather_column(uint8_t *out, uint32_t at, uint32_t c, const adisk_row *rows, uint32_t n, int write) {
  const adisk_table *first = rows[0].table;
  uint8_t ty = adisk_col_type(first, c);
  uint32_t w = adisk_type_width(ty), data = adisk_align8(at), valid = 0, aux = 0;
  int nulls = 0, var = adisk_is_var(ty);
  for (uint32_t i = 0; i < n && !nulls; i++) nulls = adisk_col_valid(rows[i].table, c) != NULL;
  at = data + (var ? 4 * (n + 1) : w * n);
  if (nulls) { valid = adisk_align8(at); at = valid + n; }
  if (var) { aux = adisk_align8(at); at = aux; }
  for (uint32_t i = 0; i < n; i++) {
    const adisk_table *t = rows[i].table;
    uint32_t r = rows[i].row;
    if (var) {
      uint32_t len;
      const uint8_t *v = adisk_col_bytes(t, c, r, &len);
      if (write) { adisk_put_u32(out + data + 4 * i, at - aux); __builtin_memcpy(out + at, v, len); }
      at += len;
    } else if (write) {
      __builtin_memcpy(out + data + w * i, (const uint8_t *)adisk_col_data(t, c) + w * r, w);
    }
    if (write && nulls) { const uint8_t *vv = adisk_col_valid(t, c); out[valid + i] = vv ? vv[r] : 1; }
  }
  if (write) {
    uint8_t *d = out + 16 + 16 * c;
    if (var) adisk_put_u32(out + data + 4 * n, at - aux);
    d[0] = ty; d[1] = adisk_desc(first, c)[1]; d[2] = 0; d[3] = 0;
    adisk_put_u32(d + 4, data); adisk_put_u32(d + 8, valid); adisk_put_u32(d + 12, aux);
  }
  return at;
}

/* Copies `n` >= 1 rows (of tables with the same column types) into one ADT1 table at `out`.
 * Returns its length, or -1 if it takes more than `capacity` bytes. */
static inline int32_t adisk_gather(uint8_t *out, uint32_t capacity, const adisk_row *rows, uint32_t n) {
  uint32_t cols = rows[0].table->columns, head = 16 + 16 * cols, at = head;
  for (uint32_t c = 0; c < cols; c++) at = adisk_gather_column(out, at, c, rows, n, 0);
  at = adisk_align8(at);
  if (at > capacity) return -1;
  adisk_put_u32(out, 0x31544441u); adisk_put_u32(out + 4, n); adisk_put_u32(out + 8, cols); adisk_put_u32(out + 12, at);
  for (uint32_t c = 0, w = head; c < cols; c++) w = adisk_gather_column(out, w, c, rows, n, 1);
  return (int32_t)at;
}

/* Emits `n` rows on `port` as ADT1 tables built in `out` (`capacity` bytes): one table, or
 * halves of the rows until each fits. The port's output must be declared with the rows' types. */
static inline int32_t adisk_emit_rows(int32_t port, uint8_t *out, uint32_t capacity, const adisk_row *rows, uint32_t n) {
  if (n == 0) return ADISK_OK;
  int32_t len = adisk_gather(out, capacity, rows, n);
  if (len >= 0) return adisk_emit(port, out, len);
  if (n == 1) return ADISK_NO_SCRATCH;
  int32_t rc = adisk_emit_rows(port, out, capacity, rows, n / 2);
  return rc != ADISK_OK ? rc : adisk_emit_rows(port, out, capacity, rows + n / 2, n - n / 2);
}

#endif
