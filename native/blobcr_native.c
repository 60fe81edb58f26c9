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

static PyMethodDef native_methods[] = {
    {"is_zero", native_is_zero, METH_VARARGS, is_zero_doc},
    {"zero_map", native_zero_map, METH_VARARGS, zero_map_doc},
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
