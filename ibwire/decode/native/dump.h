/* tshark -V's hex dump of each Data item, from the marker lines ibwire's tree text holds in its place. */
#ifndef IBWIRE_DUMP_H
#define IBWIRE_DUMP_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* dumps(text, show, out) -> n: text with every line that starts with DUMP_MARK (the marker, then the data's
 * bytes as plain hex) replaced by tshark's dump of those bytes (a blank line, then per 16 bytes the offset,
 * the bytes in hex and their printable ASCII), or removed when show is false (-x prints the frame instead),
 * written to out[:n]; -size, writing nothing, when out is shorter than size.  The caller keeps out from one
 * batch to the next, so its pages are not faulted in again. */
#define DUMP_MARK '\x01'
/* The dump of the n bytes at b ("\n", then a line per 16 bytes) written to out, and the bytes it takes. */
size_t dump_bytes(const uint8_t *b, size_t n, uint8_t *out);
size_t dump_size(size_t n);
PyObject *dumps_py(PyObject *self, PyObject *args);
extern const char dumps_doc[];

#endif
