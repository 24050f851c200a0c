/* tensorcom.shards._ctarscan: the C twin of tensorcom.shards._tarscan.scan_python (see that module for the contract).
 *
 *     scan(buf, pos, end) -> iterator of (name: str, key: str | None, extension: str | None, data: bytes)
 *
 * Walks tar headers in the buffer `buf` from offset `pos`, taking every member that lies wholly in
 * buf[pos:end], together with the pax extended ('x'), pax global ('g') and GNU long-name ('L', 'K')
 * headers before it: exact unsigned checksum, plain octal size, pax records in their strict form
 * ("LENGTH KEY=VALUE\n"; `path` and `size` are applied, other keys ignored). It yields the regular,
 * non-__meta__ members (type 0, '0', '7'), each with its key and lower-cased extension as
 * tarstream.split_name makes them (None, None without one), and skips the others (directories,
 * links, ...). At the first member it does not take (bad or unusual data, a member crossing `end`,
 * the end-of-archive block) it stops; the iterator's return value (the value of its StopIteration,
 * which `yield from` hands back) is (offset of the first header of that member, its pax / GNU headers
 * included; name of the last member taken or None). It never raises on bad data: the Python parser
 * takes over where it stops.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define BLOCK 512

typedef struct {
    PyObject_HEAD
    Py_buffer view;     /* the buffer, held for the iterator's lifetime */
    Py_ssize_t pos;     /* next header offset */
    Py_ssize_t end;     /* end of the valid bytes */
    PyObject *last;     /* name of the last member taken, or NULL */
    int done;
} ScanObject;

static int is_space(unsigned char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* An octal field as Python's int(field.split(b"\0")[0].strip() or b"0", 8) reads its plain form:
 * blanks, octal digits, blanks, then NUL or the end of the field. -1 for anything else. */
static long long plain_octal(const unsigned char *field, int width) {
    int i = 0, stop = 0;
    long long value = 0;
    while (stop < width && field[stop]) stop++;
    while (i < stop && is_space(field[i])) i++;
    while (i < stop && field[i] >= '0' && field[i] <= '7') {
        if (value > (1LL << 55)) return -1;
        value = value * 8 + (field[i++] - '0');
    }
    while (i < stop && is_space(field[i])) i++;
    return i == stop ? value : -1;
}

static int checksum_ok(const unsigned char *header) {
    long long stored = plain_octal(header + 148, 8);
    long sum = 8 * ' ';
    int i;
    for (i = 0; i < 148; i++) sum += header[i];
    for (i = 156; i < BLOCK; i++) sum += header[i];
    return stored == sum;
}

static Py_ssize_t field_length(const unsigned char *field, Py_ssize_t width) {
    const unsigned char *nul = memchr(field, 0, width);
    return nul ? nul - field : width;
}

/* The raw member name into `out` (at least 256 bytes): the name field, after the ustar prefix and a
 * slash when the header has one. Returns its length. */
static Py_ssize_t raw_name(const unsigned char *header, char *out) {
    Py_ssize_t length = field_length(header, 100), prefix;
    if (!header[345] || memcmp(header + 257, "ustar\0" "00", 8) != 0) {
        memcpy(out, header, length);
        return length;
    }
    prefix = field_length(header + 345, 155);
    memcpy(out, header + 345, prefix);
    out[prefix] = '/';
    memcpy(out + prefix + 1, header, length);
    return prefix + 1 + length;
}

static PyObject *decode(const char *text, Py_ssize_t length) {
    return PyUnicode_DecodeUTF8(text, length, "surrogateescape");
}

/* (key, extension) as tarstream.split_name makes them: key up to the first dot of the basename, the
 * extension the rest, lower-cased; (None, None) when the basename has no dot or starts with one. */
static int split_name(const char *name, Py_ssize_t length, PyObject **key, PyObject **ext) {
    Py_ssize_t slash = length - 1, dot, i;
    int plain = 1;  /* the extension is already lower-case ASCII */
    while (slash >= 0 && name[slash] != '/') slash--;
    for (dot = slash + 1; dot < length && name[dot] != '.'; dot++) {}
    if (dot >= length || dot == slash + 1) {
        *key = Py_NewRef(Py_None);
        *ext = Py_NewRef(Py_None);
        return 0;
    }
    for (i = dot + 1; i < length; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c >= 0x80 || (c >= 'A' && c <= 'Z')) plain = 0;
    }
    *key = decode(name, dot);
    if (!*key) return -1;
    *ext = decode(name + dot + 1, length - dot - 1);
    if (*ext && !plain) Py_SETREF(*ext, PyObject_CallMethod(*ext, "lower", NULL));
    if (!*ext) { Py_CLEAR(*key); return -1; }
    return 0;
}

static int meta_component(const char *name, Py_ssize_t first) {
    return first >= 4 && name[0] == '_' && name[1] == '_' && name[first - 1] == '_' && name[first - 2] == '_';
}

/* Whether the name matches re.match(r"__[^/]*__($|/)"): its first path component is __something__
 * (a metadata member); like `$`, a final newline after the last component is allowed. */
static int is_meta(const char *name, Py_ssize_t length) {
    const char *slash;
    if (length < 4 || name[0] != '_' || name[1] != '_')
        return 0;
    slash = memchr(name, '/', length);
    if (slash)
        return meta_component(name, slash - name);
    return meta_component(name, length) || (name[length - 1] == '\n' && meta_component(name, length - 1));
}

static PyObject *stop_with_state(ScanObject *self) {
    PyObject *state, *exn;
    self->done = 1;
    state = Py_BuildValue("(nO)", self->pos, self->last ? self->last : Py_None);
    if (!state) return NULL;
    exn = PyObject_CallOneArg(PyExc_StopIteration, state);
    Py_DECREF(state);
    if (!exn) return NULL;
    PyErr_SetObject(PyExc_StopIteration, exn);
    Py_DECREF(exn);
    return NULL;
}

/* The path and size a member's pax / GNU long-name headers set (path NULL, size -1 when unset). */
typedef struct {
    const char *path;
    Py_ssize_t path_length;
    long long size;
} Overrides;

/* Apply the strict-form pax records data[0:length] to `o`. Returns 0, or -1 when a record is not
 * "LENGTH KEY=VALUE\n" or a size is not 1-18 decimal digits (the careful parser then decides). */
static int pax_overrides(const char *data, Py_ssize_t length, Overrides *o) {
    Py_ssize_t pos = 0;
    while (pos < length && data[pos]) {
        Py_ssize_t i = pos, stop, equal;
        long long record = 0;
        while (i < length && i - pos < 19 && data[i] >= '0' && data[i] <= '9')
            record = record * 10 + (data[i++] - '0');
        if (i == pos || i >= length || data[i] != ' ' || record > length - pos)
            return -1;
        stop = pos + (Py_ssize_t)record;
        for (equal = i + 1; equal < stop && data[equal] != '='; equal++) {}
        if (equal >= stop || data[stop - 1] != '\n')
            return -1;
        if (equal - i - 1 == 4 && memcmp(data + i + 1, "path", 4) == 0) {
            o->path = data + equal + 1;
            o->path_length = stop - 1 - equal - 1;
        } else if (equal - i - 1 == 4 && memcmp(data + i + 1, "size", 4) == 0) {
            Py_ssize_t k, digits = stop - 1 - equal - 1;
            long long size = 0;
            if (digits < 1 || digits > 18) return -1;
            for (k = equal + 1; k < stop - 1; k++) {
                if (data[k] < '0' || data[k] > '9') return -1;
                size = size * 10 + (data[k] - '0');
            }
            o->size = size;
        }
        pos = stop;
    }
    return 0;
}

/* Take the special member of type `kind` with contents data[0:size] into `o`; -1 to stop there. */
static int special_overrides(unsigned char kind, const char *data, Py_ssize_t size, Overrides *o) {
    if (kind == 'L') {
        const char *nul = memchr(data, 0, size);
        o->path = data;
        o->path_length = nul ? nul - data : size;
        return 0;
    }
    if (kind == 'x')
        return pax_overrides(data, size, o);
    return 0;  /* 'K' (GNU long link name) and 'g' (pax global header) change nothing */
}

/* The (name, key, extension, data) tuple of a regular member; NULL with an exception set. */
static PyObject *member_item(PyObject *name, const char *text, Py_ssize_t length, const unsigned char *data,
                             long long size) {
    PyObject *key, *ext, *bytes, *item;
    if (split_name(text, length, &key, &ext) < 0) return NULL;
    bytes = PyBytes_FromStringAndSize((const char *)data, (Py_ssize_t)size);
    if (!bytes) { Py_DECREF(key); Py_DECREF(ext); return NULL; }
    item = PyTuple_New(4);
    if (!item) { Py_DECREF(key); Py_DECREF(ext); Py_DECREF(bytes); return NULL; }
    PyTuple_SET_ITEM(item, 0, Py_NewRef(name));
    PyTuple_SET_ITEM(item, 1, key);
    PyTuple_SET_ITEM(item, 2, ext);
    PyTuple_SET_ITEM(item, 3, bytes);
    return item;
}

static PyObject *scan_next(ScanObject *self) {
    const unsigned char *base = (const unsigned char *)self->view.buf;
    Py_ssize_t at;  /* the header being read; self->pos stays at the first header of its member */
    Overrides o = {NULL, 0, -1};
    if (self->done) return NULL;
    at = self->pos;
    while (self->end - at >= BLOCK) {
        const unsigned char *header = base + at;
        unsigned char kind = header[156];
        long long size;
        Py_ssize_t next, length;
        const char *text;
        char buffer[260];
        PyObject *name;
        if (!header[0] || !checksum_ok(header))
            break;
        size = plain_octal(header + 124, 12);
        if (size < 0)
            break;
        if (kind == 'K' || kind == 'L' || kind == 'g' || kind == 'x') {
            if (size > self->end - at - BLOCK
                || special_overrides(kind, (const char *)header + BLOCK, (Py_ssize_t)size, &o) < 0)
                break;
            at += BLOCK + (Py_ssize_t)((size + BLOCK - 1) / BLOCK * BLOCK);
            continue;
        }
        if (o.size >= 0)
            size = o.size;
        if (size > self->end - at - BLOCK)
            break;
        next = at + BLOCK + (Py_ssize_t)((size + BLOCK - 1) / BLOCK * BLOCK);
        if (next > self->end)
            break;
        if (o.path) {
            text = o.path;
            length = o.path_length;
        } else {
            length = raw_name(header, buffer);
            text = buffer;
        }
        name = decode(text, length);
        if (!name) return NULL;
        Py_XSETREF(self->last, name);
        self->pos = at = next;
        o.path = NULL;
        o.size = -1;
        if ((kind != 0 && kind != '0' && kind != '7') || is_meta(text, length))
            continue;
        return member_item(name, text, length, header + BLOCK, size);
    }
    return stop_with_state(self);
}

static void scan_dealloc(ScanObject *self) {
    PyBuffer_Release(&self->view);
    Py_XDECREF(self->last);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject ScanType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tensorcom.shards._ctarscan.Scan",
    .tp_basicsize = sizeof(ScanObject),
    .tp_dealloc = (destructor)scan_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Iterator of (name, key, extension, data) over the ordinary tar members of a buffer.",
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)scan_next,
};

static PyObject *scan(PyObject *module, PyObject *args) {
    PyObject *source;
    Py_ssize_t pos, end;
    ScanObject *self;
    if (!PyArg_ParseTuple(args, "Onn:scan", &source, &pos, &end)) return NULL;
    self = PyObject_New(ScanObject, &ScanType);
    if (!self) return NULL;
    self->last = NULL;
    self->done = 0;
    if (PyObject_GetBuffer(source, &self->view, PyBUF_SIMPLE) < 0) {
        self->view.obj = NULL;
        self->view.buf = NULL;
        Py_DECREF(self);
        return NULL;
    }
    if (pos < 0 || end < pos || end > self->view.len) {
        PyErr_Format(PyExc_ValueError, "scan: need 0 <= pos <= end <= len(buf), got pos=%zd end=%zd len=%zd",
                     pos, end, self->view.len);
        Py_DECREF(self);
        return NULL;
    }
    self->pos = pos;
    self->end = end;
    return (PyObject *)self;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(buf, pos, end) -> iterator of (name, key, extension, data) for the ordinary tar members wholly in "
     "buf[pos:end]; its return value (StopIteration.value) is (offset of the first header not "
     "taken, name of the last member taken or None)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "tensorcom.shards._ctarscan",
    "C scanner of tar headers for tensorcom.shards._tarstream (see tensorcom.shards._tarscan).", -1, methods,
};

PyMODINIT_FUNC PyInit__ctarscan(void) {
    PyObject *m;
    if (PyType_Ready(&ScanType) < 0) return NULL;
    m = PyModule_Create(&module);
    return m;
}
