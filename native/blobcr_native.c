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

/*
 * blobcr_agent._native: the hot data-path helpers of BlobCR, in C.
 *
 * Every function that scans a buffer releases the GIL, so chunk splitting
 * and zero detection run in parallel with hashing and backend I/O.
 *
 * Copyright BlobCR for OpenStack developers. Apache-2.0.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "core.h"

/* A region is all zero when its first 16 bytes are zero and it equals
 * itself shifted by 16 bytes: memcmp is vectorised by libc, a byte loop
 * is not. */
static int
region_is_zero(const unsigned char *p, Py_ssize_t len)
{
    static const unsigned char zeros[16];
    if (len <= 16)
        return memcmp(p, zeros, (size_t)len) == 0;
    if (memcmp(p, zeros, 16) != 0)
        return 0;
    return memcmp(p, p + 16, (size_t)(len - 16)) == 0;
}

PyDoc_STRVAR(is_zero_doc,
"is_zero(buffer) -> bool\n\n"
"True when every byte of the buffer is zero.");

static PyObject *
native_is_zero(PyObject *self, PyObject *args)
{
    Py_buffer view;
    int zero;

    if (!PyArg_ParseTuple(args, "y*:is_zero", &view))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    zero = region_is_zero((const unsigned char *)view.buf, view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyBool_FromLong(zero);
}

PyDoc_STRVAR(zero_map_doc,
"zero_map(buffer, chunk_size) -> bytes\n\n"
"Split the buffer into chunks of chunk_size bytes (the last one may be\n"
"shorter) and return one byte per chunk: 1 if the chunk is all zero,\n"
"0 otherwise.");

static PyObject *
native_zero_map(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t chunk_size, nchunks, i;
    PyObject *result;
    unsigned char *out;

    if (!PyArg_ParseTuple(args, "y*n:zero_map", &view, &chunk_size))
        return NULL;
    if (chunk_size <= 0) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "chunk_size must be positive");
        return NULL;
    }
    nchunks = (view.len + chunk_size - 1) / chunk_size;
    result = PyBytes_FromStringAndSize(NULL, nchunks);
    if (result == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    out = (unsigned char *)PyBytes_AS_STRING(result);
    Py_BEGIN_ALLOW_THREADS
    for (i = 0; i < nchunks; i++) {
        Py_ssize_t start = i * chunk_size;
        Py_ssize_t len = view.len - start < chunk_size ?
            view.len - start : chunk_size;
        out[i] = (unsigned char)region_is_zero(
            (const unsigned char *)view.buf + start, len);
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return result;
}

PyDoc_STRVAR(patch_nodes_doc,
"patch_nodes(items, fanout, slot_size, olds) -> list\n\n"
"One level of a path-copying tree update. items is a list of\n"
"(key, value) sorted by key, value being slot_size bytes; olds maps\n"
"node id (key // fanout) to the old node (bytes) or None. Returns\n"
"[(node id, new node or None if all zero)] in node id order.");

static PyObject *
native_patch_nodes(PyObject *self, PyObject *args)
{
    PyObject *items, *olds, *result = NULL, *seq = NULL;
    Py_ssize_t fanout, slot, n, k = 0;
    char *node = NULL;

    if (!PyArg_ParseTuple(args, "OnnO!:patch_nodes", &items, &fanout, &slot,
                          &PyDict_Type, &olds))
        return NULL;
    if (fanout < 2 || slot < 1) {
        PyErr_SetString(PyExc_ValueError, "bad fanout or slot size");
        return NULL;
    }
    seq = PySequence_Fast(items, "items must be a sequence");
    if (!seq)
        return NULL;
    n = PySequence_Fast_GET_SIZE(seq);
    node = malloc((size_t)(fanout * slot));
    result = PyList_New(0);
    if (!node || !result)
        goto fail;
    while (k < n) {
        long long key, id;
        PyObject *pair = PySequence_Fast_GET_ITEM(seq, k), *old, *idobj;
        if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
            PyErr_SetString(PyExc_TypeError, "items are (key, value)");
            goto fail;
        }
        key = PyLong_AsLongLong(PyTuple_GET_ITEM(pair, 0));
        if (key < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "negative key");
            goto fail;
        }
        id = key / fanout;
        idobj = PyLong_FromLongLong(id);
        if (!idobj)
            goto fail;
        old = PyDict_GetItemWithError(olds, idobj);
        if (!old && PyErr_Occurred()) {
            Py_DECREF(idobj);
            goto fail;
        }
        if (old && old != Py_None) {
            if (!PyBytes_Check(old) ||
                PyBytes_GET_SIZE(old) != fanout * slot) {
                Py_DECREF(idobj);
                PyErr_SetString(PyExc_ValueError, "old node of wrong size");
                goto fail;
            }
            memcpy(node, PyBytes_AS_STRING(old), (size_t)(fanout * slot));
        } else {
            memset(node, 0, (size_t)(fanout * slot));
        }
        /* Patch every item of this node. */
        for (; k < n; k++) {
            PyObject *p = PySequence_Fast_GET_ITEM(seq, k), *value;
            long long kk;
            if (!PyTuple_Check(p) || PyTuple_GET_SIZE(p) != 2)
                break;
            kk = PyLong_AsLongLong(PyTuple_GET_ITEM(p, 0));
            if (kk / fanout != id)
                break;
            value = PyTuple_GET_ITEM(p, 1);
            if (!PyBytes_Check(value) || PyBytes_GET_SIZE(value) != slot) {
                Py_DECREF(idobj);
                PyErr_SetString(PyExc_ValueError, "value of wrong size");
                goto fail;
            }
            memcpy(node + (kk % fanout) * slot, PyBytes_AS_STRING(value),
                   (size_t)slot);
        }
        {
            PyObject *out, *entry;
            if (region_is_zero((unsigned char *)node, fanout * slot)) {
                Py_INCREF(Py_None);
                out = Py_None;
            } else {
                out = PyBytes_FromStringAndSize(node, fanout * slot);
            }
            entry = out ? PyTuple_Pack(2, idobj, out) : NULL;
            Py_XDECREF(out);
            Py_DECREF(idobj);
            if (!entry || PyList_Append(result, entry) < 0) {
                Py_XDECREF(entry);
                goto fail;
            }
            Py_DECREF(entry);
        }
    }
    free(node);
    Py_DECREF(seq);
    return result;
fail:
    free(node);
    Py_XDECREF(result);
    Py_XDECREF(seq);
    return NULL;
}

PyDoc_STRVAR(crash_point_doc,
"crash_point(where)\n\n"
"A crash point of the agent, counted with the mirror core's: with\n"
"BLOBCR_CORE_CRASH_AT=k in the environment at import, the process SIGKILLs\n"
"itself at the k-th one passed (k = 0: count only).");

static PyObject *
native_crash_point(PyObject *self, PyObject *args)
{
    const char *where;

    if (!PyArg_ParseTuple(args, "s:crash_point", &where))
        return NULL;
    MC_CRASH_POINT(where);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(crash_points_doc,
"crash_points() -> int\n\n"
"Crash points passed so far (the core's and crash_point()'s); 0 unless\n"
"BLOBCR_CORE_CRASH_AT armed them.");

static PyObject *
native_crash_points(PyObject *self, PyObject *noargs)
{
    return PyLong_FromLong(mc_crash_passed());
}

static PyMethodDef native_methods[] = {
    {"crash_point", native_crash_point, METH_VARARGS, crash_point_doc},
    {"crash_points", native_crash_points, METH_NOARGS, crash_points_doc},
    {"is_zero", native_is_zero, METH_VARARGS, is_zero_doc},
    {"zero_map", native_zero_map, METH_VARARGS, zero_map_doc},
    {"patch_nodes", native_patch_nodes, METH_VARARGS, patch_nodes_doc},
    {NULL, NULL, 0, NULL}
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    "blobcr_agent._native",
    "C core of the BlobCR agent's data path.",
    -1,
    native_methods
};

int blobcr_mirror_register(PyObject *module);     /* mirror.c */
int blobcr_fuseloop_register(PyObject *module);   /* fuseloop.c */

PyMODINIT_FUNC
PyInit__native(void)
{
    PyObject *module = PyModule_Create(&native_module);
    if (module && (blobcr_mirror_register(module) < 0 ||
                   blobcr_fuseloop_register(module) < 0)) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
