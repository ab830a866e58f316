/* pngtool.c — what test/plot.sh asks of a PNG, read with cairo (a program of its own,
 * not linked into the test binaries):
 *   pngtool size A.png          "W H"
 *   pngtool count A.png RRGGBB  the pixels within 3 of that colour in each channel
 *   pngtool diff A.png B.png    "N X0 Y0 X1 Y1": the pixels that differ and their
 *                               bounding box (inclusive; "0" when none); sizes must match
 * Exits 2 on a file that is not a PNG or on a size mismatch. */
#include <cairo.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The image as opaque 0xRRGGBB pixels (alpha composed over white), or exit 2. */
static uint32_t *load(const char *path, int *w, int *h) {
    cairo_surface_t *s = cairo_image_surface_create_from_png(path);
    if (cairo_surface_status(s) != CAIRO_STATUS_SUCCESS) {
        fprintf(stderr, "pngtool: %s: %s\n", path, cairo_status_to_string(cairo_surface_status(s)));
        exit(2);
    }
    *w = cairo_image_surface_get_width(s);
    *h = cairo_image_surface_get_height(s);
    /* composed over white in a surface of our own format */
    cairo_surface_t *rgb = cairo_image_surface_create(CAIRO_FORMAT_RGB24, *w, *h);
    cairo_t *cr = cairo_create(rgb);
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    cairo_set_source_surface(cr, s, 0, 0);
    cairo_paint(cr);
    cairo_destroy(cr);
    cairo_surface_flush(rgb);
    uint32_t *px = malloc((size_t)*w * *h * sizeof *px);
    const unsigned char *data = cairo_image_surface_get_data(rgb);
    int stride = cairo_image_surface_get_stride(rgb);
    for (int y = 0; y < *h; y++)
        for (int x = 0; x < *w; x++)
            px[(size_t)y * *w + x] = ((const uint32_t *)(data + (size_t)y * stride))[x] & 0xffffff;
    cairo_surface_destroy(rgb);
    cairo_surface_destroy(s);
    return px;
}

static int near(uint32_t a, uint32_t b) {
    for (int sh = 0; sh < 24; sh += 8) {
        int d = (int)((a >> sh) & 0xff) - (int)((b >> sh) & 0xff);
        if (d < -3 || d > 3) return 0;
    }
    return 1;
}

static int run(int argc, char **argv) {
    int w, h, w2, h2;
    if (argc == 3 && !strcmp(argv[1], "size")) {
        free(load(argv[2], &w, &h));
        printf("%d %d\n", w, h);
        return 0;
    }
    if (argc == 4 && !strcmp(argv[1], "count")) {
        uint32_t *a = load(argv[2], &w, &h), want = (uint32_t)strtoul(argv[3], NULL, 16);
        long n = 0;
        for (long i = 0; i < (long)w * h; i++) n += near(a[i], want);
        printf("%ld\n", n);
        free(a);
        return 0;
    }
    if (argc == 4 && !strcmp(argv[1], "diff")) {
        uint32_t *a = load(argv[2], &w, &h), *b = load(argv[3], &w2, &h2);
        if (w != w2 || h != h2) {
            fprintf(stderr, "pngtool: %dx%d and %dx%d differ in size\n", w, h, w2, h2);
            return 2;
        }
        long n = 0;
        int x0 = w, y0 = h, x1 = -1, y1 = -1;
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                if (a[(size_t)y * w + x] == b[(size_t)y * w + x]) continue;
                n++;
                x0 = x < x0 ? x : x0, x1 = x > x1 ? x : x1;
                y0 = y < y0 ? y : y0, y1 = y > y1 ? y : y1;
            }
        if (n)
            printf("%ld %d %d %d %d\n", n, x0, y0, x1, y1);
        else
            printf("0\n");
        free(a);
        free(b);
        return 0;
    }
    fprintf(stderr, "usage: pngtool size A.png | count A.png RRGGBB | diff A.png B.png\n");
    return 2;
}

int main(int argc, char **argv) {
    int rc = run(argc, argv);
    cairo_debug_reset_static_data(); /* for a leak checker (make DEBUG=1) */
    return rc;
}
