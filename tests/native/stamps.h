/* Chunk stamps of the native tests (stress_core.c, crash_core.c): a
 * block filled with one 64-bit value throughout, so that a torn or mixed
 * block shows. */
#ifndef BLOBCR_TEST_STAMPS_H
#define BLOBCR_TEST_STAMPS_H

#include <stdint.h>
#include <string.h>

static inline void
stamp_fill(void *block, int words, uint64_t v)
{
    for (int k = 0; k < words; k++)
        memcpy((char *)block + 8 * k, &v, 8);
}

/* The stamp ``block`` holds, or ``mixed`` if it is not one throughout. */
static inline uint64_t
stamp_read(const void *block, int words, uint64_t mixed)
{
    uint64_t first, w;
    memcpy(&first, block, 8);
    for (int k = 1; k < words; k++) {
        memcpy(&w, (const char *)block + 8 * k, 8);
        if (w != first)
            return mixed;
    }
    return first;
}

#endif
