/*
 * Copyright 2026 The BlobCR for OpenStack Authors
 *
 *    Licensed under the Apache License, Version 2.0 (the "License"); you may
 *    not use this file except in compliance with the License. You may obtain
 *    a copy of the License at
 *
 *         http://www.apache.org/licenses/LICENSE-2.0
 *
 *    Unless required by applicable law or agreed to in writing, software
 *    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
 *    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
 *    License for the specific language governing permissions and limitations
 *    under the License.
 */

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
