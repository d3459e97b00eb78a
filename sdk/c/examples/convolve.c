/* convolve: the image convolution of the Active Disks paper (Figure 1). A file stream of
 * side×side one-byte grayscale images; each image is convolved with a 3×3 kernel and emitted
 * whole (one raw record per image): interior pixel = clamp(sum(kernel·pixels) / divisor, 0, 255),
 * border pixels copied.   side=512 kernel=1,2,1,2,4,2,1,2,1 divisor=16 */
#include "adisk.h"

static uint32_t side = 512;
static int32_t kernel[9] = { 1, 2, 1, 2, 4, 2, 1, 2, 1 };
static int32_t divisor = 16;
static uint8_t *image, *out;
static uint32_t filled;
static int64_t next_position;

ADISK_DEFAULT_INPUT_AREA

ADISK_EXPORT("adisk_init") int32_t adisk_init(const char *params, int32_t n) {
  const char *v; int32_t len; int64_t x;
  if (!adisk_param(params, n, "_input", &v, &len) || len != 5 || v[0] != 'b') return ADISK_BAD_INPUT;
  if (adisk_param(params, n, "side", &v, &len)) {
    if (!adisk_parse_scaled(v, len, 0, &x) || x < 3 || x > 4096) return ADISK_BAD_PARAM;
    side = (uint32_t)x;
  }
  if (adisk_param(params, n, "kernel", &v, &len)) {
    int32_t i = 0;
    for (int k = 0; k < 9; k++) {
      int32_t used = adisk_parse_scaled(v + i, len - i, 0, &x);
      if (!used) return ADISK_BAD_PARAM;
      kernel[k] = (int32_t)x;
      i += used;
      if (k < 8) { if (i >= len || v[i] != ',') return ADISK_BAD_PARAM; i++; }
    }
  }
  if (adisk_param(params, n, "divisor", &v, &len)) {
    if (!adisk_parse_scaled(v, len, 0, &x) || x == 0) return ADISK_BAD_PARAM;
    divisor = (int32_t)x;
  }
  image = adisk_grow(side * side);
  out = adisk_grow(side * side);
  if (!image || !out) return ADISK_NO_SCRATCH;
  return ADISK_OK;
}

static int32_t convolve_and_emit(void) {
  __builtin_memcpy(out, image, side * side);
  for (uint32_t y = 1; y + 1 < side; y++) {
    const uint8_t *r0 = image + (y - 1) * side, *r1 = r0 + side, *r2 = r1 + side;
    uint8_t *o = out + y * side;
    for (uint32_t x = 1; x + 1 < side; x++) {
      int32_t s = kernel[0] * r0[x - 1] + kernel[1] * r0[x] + kernel[2] * r0[x + 1]
                + kernel[3] * r1[x - 1] + kernel[4] * r1[x] + kernel[5] * r1[x + 1]
                + kernel[6] * r2[x - 1] + kernel[7] * r2[x] + kernel[8] * r2[x + 1];
      s /= divisor;
      o[x] = (uint8_t)(s < 0 ? 0 : s > 255 ? 255 : s);
    }
  }
  filled = 0;
  return adisk_emit(out, (int32_t)(side * side));
}

ADISK_EXPORT("adisk_process") int32_t adisk_process(const uint8_t *buf, int32_t len, int64_t position) {
  if (position != next_position) return ADISK_BAD_INPUT; /* images must arrive whole and in order */
  next_position = position + len;
  uint32_t size = side * side;
  while (len > 0) {
    uint32_t take = size - filled < (uint32_t)len ? size - filled : (uint32_t)len;
    __builtin_memcpy(image + filled, buf, take);
    filled += take; buf += take; len -= (int32_t)take;
    if (filled == size && convolve_and_emit() != ADISK_OK) return ADISK_FAILED;
  }
  return ADISK_OK;
}

ADISK_EXPORT("adisk_finish") int32_t adisk_finish(void) {
  return filled == 0 ? ADISK_OK : ADISK_BAD_INPUT; /* a partial image at the end */
}
