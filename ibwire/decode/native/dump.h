/* tshark -V's hex dump of each Data item, from the marker lines ibwire's tree text holds in its place. */
#ifndef IBWIRE_DUMP_H
#define IBWIRE_DUMP_H
#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* dumps(text, show, out) -> n: text with every line that starts with DUMP_MARK (the marker, then the data's
 * bytes as plain hex) replaced by tshark's dump of those bytes (a blank line, then per 16 bytes the offset,
 * the bytes in hex and their printable ASCII), or removed when show is false (-x prints the frame instead),
 * written to out[:n]; -size, writing nothing, when out is shorter than size.  The caller keeps out from one
 * batch to the next, so its pages are not faulted in again. */
#define DUMP_MARK '\x01'
PyObject *dumps_py(PyObject *self, PyObject *args);
extern const char dumps_doc[];

#endif
