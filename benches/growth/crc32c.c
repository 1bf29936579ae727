/*
 * CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), for benches/growth/seglog.py through
 * ctypes: the segment catalog's record checksum (src/protocol/segment_log/mod.rs). Python's
 * zlib.crc32 is the IEEE polynomial, and a pure-Python CRC-32C would take minutes over the
 * ~250 MB of records of a 1M-segment backlog.
 *
 * Build: gcc -shared -fPIC -O2 -Wall -Wextra -o crc32c.so crc32c.c
 */
#include <stddef.h>
#include <stdint.h>

static uint32_t table[8][256];
static int ready;

static void init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
    ready = 1;
}

/* The CRC-32C of len bytes at data (slicing-by-8; byte order independent). */
uint32_t thadam_crc32c(const unsigned char *data, size_t len) {
    if (!ready)
        init();
    uint32_t c = 0xffffffffu;
    while (len >= 8) {
        uint32_t lo = c ^ ((uint32_t)data[0] | (uint32_t)data[1] << 8 | (uint32_t)data[2] << 16 |
                           (uint32_t)data[3] << 24);
        c = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^
            table[4][lo >> 24] ^ table[3][data[4]] ^ table[2][data[5]] ^ table[1][data[6]] ^
            table[0][data[7]];
        data += 8;
        len -= 8;
    }
    while (len--)
        c = (c >> 8) ^ table[0][(c ^ *data++) & 0xff];
    return c ^ 0xffffffffu;
}
