/* http_server.c - the HTTP server of http.h on libmicrohttpd: reads a
 * request whole, calls the handler, and sends its JSON, text or file back
 * (http_response.c), or parks the connection on a stream that a producer
 * answers later (http_stream.c). */
#include "http_guard.h"
#include "http_internal.h"
#include "moontail/transport.h"
#include "moontail/sock.h"

#include <inttypes.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct mt_http_server {
    struct MHD_Daemon *d;
    mt_sock fd; /* the listen socket; MHD owns it once started */
    char addr[160];
    size_t max_body; /* a request's body limit when admit gives none */
    mt_http_handler handler;
    void *ctx;
    size_t (*admit)(void *ctx, const mt_http_request *req, mt_http_response *resp);
    uint64_t refused_unread, body_bytes; /* mt_http_stats (atomic) */
    json_t *(*error_body)(int status, const char *message);
    http_guard *guard;       /* connection limits and deadlines */
    pthread_mutex_t mu;      /* guards streams and stopping */
    mt_http_stream *streams; /* attached to a connection, for stop */
    bool stopping;
    char *tls_cert, *tls_key; /* PEM, for the daemon's life (key wiped at stop) */
};

/* What the server keeps per request: the body read so far, then the stream
 * its answer comes from (if the handler gave one). */
typedef struct body {
    char *data;
    size_t len, cap;
    size_t max_body; /* this request's limit (the admit hook's, or the server's) */
    bool too_big;
    mt_http_stream *stream;
    void *inflight; /* its place among its token's requests in flight (http_guard.c) */
} body;

/* name's value in a NULL-terminated name, value, ... list (header names ignore case). */
static const char *list_value(const char *const *kv, const char *name, bool nocase) {
    for (; kv && kv[0] && kv[1]; kv += 2)
        if (nocase ? strcasecmp(kv[0], name) == 0 : strcmp(kv[0], name) == 0) return kv[1];
    return NULL;
}

const char *mt_http_header(const mt_http_request *req, const char *name) {
    if (!req->conn) return list_value(req->headers, name, true);
    return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

const char *mt_http_query(const mt_http_request *req, const char *name) {
    if (!req->conn) return list_value(req->query, name, false);
    return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

const char *mt_http_bearer(const mt_http_request *req) {
    const char *a = mt_http_header(req, "Authorization");
    if (!a || strncasecmp(a, "Bearer ", 7) != 0) return NULL;
    a += 7;
    while (*a == ' ') a++;
    return *a ? a : NULL;
}

static void streams_add(mt_http_server *s, mt_http_stream *st) {
    pthread_mutex_lock(&s->mu);
    st->prev = NULL;
    st->next = s->streams;
    if (s->streams) s->streams->prev = st;
    s->streams = st;
    if (s->stopping) http_stream_abort(st); /* too late: the server is going away */
    pthread_mutex_unlock(&s->mu);
}

static void streams_remove(mt_http_server *s, mt_http_stream *st) {
    pthread_mutex_lock(&s->mu);
    if (st->prev)
        st->prev->next = st->next;
    else
        s->streams = st->next;
    if (st->next) st->next->prev = st->prev;
    st->prev = st->next = NULL;
    pthread_mutex_unlock(&s->mu);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls) {
    (void)version;
    mt_http_server *s = cls;
    body *b = *con_cls;
    if (!b) { /* first call: headers only */
        b = calloc(1, sizeof *b);
        if (!b) return MHD_NO;
        *con_cls = b;
        mt_http_request hr = {.conn = c};
        if (!http_guard_headers_in(s->guard, c, mt_http_bearer(&hr), &b->inflight))
            return http_queue_busy(c, http_guard_inflight_limit(s->guard), s->error_body);
        b->max_body = s->max_body;
        if (s->admit) { /* the owner's say, before a byte of the body is read */
            mt_http_request ar = {method, url, "", 0, c, NULL, NULL};
            mt_http_response resp = {0};
            size_t limit = s->admit(s->ctx, &ar, &resp);
            if (resp.status) {
                __atomic_add_fetch(&s->refused_unread, 1, __ATOMIC_RELAXED);
                return http_send_response(c, &resp, s->error_body);
            }
            if (limit) b->max_body = limit;
        }
        /* a body announced too large is refused before a byte of it is read */
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        uint64_t announced = 0;
        if (cl && http_digits(&cl, &announced) && !*cl && announced > b->max_body) {
            __atomic_add_fetch(&s->refused_unread, 1, __ATOMIC_RELAXED);
            return http_queue_too_big(c, method, url, b->max_body, s->error_body);
        }
        return MHD_YES;
    }
    if (b->stream) /* resumed: the stream has news */
        return http_stream_serve(c, b->stream, s->error_body);
    if (*upload_size) { /* a piece of the body */
        if (!b->too_big && b->len + *upload_size > b->max_body) b->too_big = true;
        if (!b->too_big) {
            __atomic_add_fetch(&s->body_bytes, *upload_size, __ATOMIC_RELAXED);
            if (b->len + *upload_size + 1 > b->cap) {
                size_t cap = (b->len + *upload_size + 1) * 2;
                char *p = realloc(b->data, cap);
                if (!p) return MHD_NO;
                b->data = p, b->cap = cap;
            }
            memcpy(b->data + b->len, upload, *upload_size);
            b->len += *upload_size;
            b->data[b->len] = 0;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    http_guard_body_in(c);
    if (b->too_big) return http_queue_too_big(c, method, url, b->max_body, s->error_body);
    mt_http_request req = {method, url, b->data ? b->data : "", b->len, c, NULL, NULL};
    mt_http_response resp = {0};
    s->handler(s->ctx, &req, &resp);
    if (resp.stream) {
        b->stream = resp.stream;
        resp.stream = NULL;
        json_decref(resp.json);
        json_decref(resp.headers);
        free(resp.text);
        free(resp.file);
        streams_add(s, b->stream);
        return http_stream_serve(c, b->stream, s->error_body);
    }
    return http_send_response(c, &resp, s->error_body);
}

static void on_done(void *cls, struct MHD_Connection *c, void **con_cls,
                    enum MHD_RequestTerminationCode toe) {
    (void)toe;
    mt_http_server *s = cls;
    body *b = *con_cls;
    if (b) {
        http_guard_request_done(s->guard, c, b->inflight);
        if (b->stream) {
            streams_remove(s, b->stream);
            http_stream_detach(b->stream);
        }
        free(b->data);
        free(b);
    }
    *con_cls = NULL;
}

/* Frees s and its TLS copies (the key wiped first). */
static void free_server(mt_http_server *s) {
    if (s->tls_key) sodium_memzero(s->tls_key, strlen(s->tls_key));
    free(s->tls_key);
    free(s->tls_cert);
    free(s);
}

/* With a certificate and key in cfg: keeps copies in s and fills opts (room
 * for 3) with MHD's TLS options. Neither: nothing. 0, or -1 with err. */
static int tls_setup(mt_http_server *s, const mt_http_server_config *cfg,
                     struct MHD_OptionItem *opts, mt_error *err) {
    if (!cfg->tls_cert_pem && !cfg->tls_key_pem) return 0;
    if (!cfg->tls_cert_pem || !cfg->tls_key_pem || !*cfg->tls_cert_pem || !*cfg->tls_key_pem)
        return mt_error_set(err, "HTTPS server on %s: a TLS certificate needs its key (both PEM)",
                            cfg->addr);
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
        return mt_error_set(err,
                            "HTTPS server on %s: this libmicrohttpd was built without TLS;"
                            " install one built with GnuTLS (Debian's libmicrohttpd12 is), or"
                            " serve plain HTTP on a loopback address",
                            cfg->addr);
    if (!(s->tls_cert = strdup(cfg->tls_cert_pem)) || !(s->tls_key = strdup(cfg->tls_key_pem)))
        return mt_error_set(err, "out of memory");
    opts[0] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_CERT, 0, s->tls_cert};
    opts[1] = (struct MHD_OptionItem){MHD_OPTION_HTTPS_MEM_KEY, 0, s->tls_key};
    opts[2] = (struct MHD_OptionItem){MHD_OPTION_END, 0, NULL};
    return 0;
}

mt_http_server *mt_http_server_start(const char *addr, int threads, size_t max_body,
                                     mt_http_handler handler, void *ctx, mt_error *err) {
    mt_http_server_config c = {
        .addr = addr, .threads = threads, .max_body = max_body, .handler = handler, .ctx = ctx};
    return mt_http_server_start_cfg(&c, err);
}

mt_http_server *mt_http_server_start_cfg(const mt_http_server_config *cfg, mt_error *err) {
    if (!cfg->addr || !cfg->handler) {
        mt_error_set(err, "HTTP server: an address and a handler are required");
        return NULL;
    }
    mt_http_server *s = calloc(1, sizeof *s);
    if (!s) {
        mt_error_set(err, "out of memory");
        return NULL;
    }
    const char *addr = cfg->addr;
    const int threads = cfg->threads;
    s->handler = cfg->handler;
    s->ctx = cfg->ctx;
    s->error_body = cfg->error_body;
    s->admit = cfg->admit;
    s->max_body = cfg->max_body ? cfg->max_body : 1 << 20;
    struct MHD_OptionItem tls_opts[3] = {{MHD_OPTION_END, 0, NULL}};
    if (tls_setup(s, cfg, tls_opts, err)) {
        free_server(s);
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    s->guard = http_guard_new(&cfg->limits, cfg->on_overload, cfg->ctx, err);
    if (!s->guard) {
        pthread_mutex_destroy(&s->mu);
        free_server(s);
        return NULL;
    }
    s->fd = mt_listen_tcp(addr, err);
    if (s->fd == MT_SOCK_NONE) {
        http_guard_free(s->guard);
        pthread_mutex_destroy(&s->mu);
        free_server(s);
        return NULL;
    }
    const char *colon = strrchr(addr, ':');
    snprintf(s->addr, sizeof s->addr, "%.*s:%d", (int)(colon - addr),
             colon == addr ? "127.0.0.1" : addr, mt_listen_port(s->fd));
    if (colon == addr) snprintf(s->addr, sizeof s->addr, "127.0.0.1:%d", mt_listen_port(s->fd));
    /* the connection timeout is libmicrohttpd's for idleness (a client that stops
     * reading an answer); the guard's deadlines bound a request's headers and body.
     * TLS (tls_setup): the flag, and the certificate and key as an option array */
    const unsigned tls_flag = s->tls_cert ? MHD_USE_TLS : 0;
    s->d = MHD_start_daemon(
        /* MHD_USE_AUTO: epoll on Linux, poll or select where there is none (Windows) */
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME | tls_flag, 0,
        http_guard_accept, s->guard, on_request, s, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)s->fd,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(threads > 0 ? threads : 4),
        MHD_OPTION_NOTIFY_COMPLETED, on_done, s, MHD_OPTION_NOTIFY_CONNECTION, http_guard_notify,
        s->guard, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)60, MHD_OPTION_CONNECTION_LIMIT,
        http_guard_mhd_limit(s->guard), MHD_OPTION_ARRAY, tls_opts, MHD_OPTION_END);
    if (!s->d) { /* MHD leaves a listen socket it was given open when it cannot start */
        mt_sock_close(s->fd);
        http_guard_free(s->guard);
        pthread_mutex_destroy(&s->mu);
        free_server(s);
        mt_error_set(err, "HTTP server on %s: libmicrohttpd could not start%s", addr,
                     tls_opts[0].option != MHD_OPTION_END
                         ? " TLS (is the certificate/key pair one GnuTLS accepts?)"
                         : "");
        return NULL;
    }
    return s;
}

void mt_http_server_stop(mt_http_server *s) {
    if (!s) return;
    /* no connection may stay suspended when libmicrohttpd stops */
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    for (mt_http_stream *st = s->streams; st; st = st->next) http_stream_abort(st);
    pthread_mutex_unlock(&s->mu);
    /* MHD closes the listen socket it was given (MHD_OPTION_LISTEN_SOCKET) when
     * it stops; closing s->fd again could close a descriptor that another
     * thread has opened meanwhile under the same number */
    MHD_stop_daemon(s->d);
    http_guard_free(s->guard); /* after: closing connections tell it */
    pthread_mutex_destroy(&s->mu);
    free_server(s);
}

const char *mt_http_server_addr(const mt_http_server *s) {
    return s->addr;
}

void mt_http_server_stats(mt_http_server *s, mt_http_stats *out) {
    http_guard_stats(s->guard, out);
    out->refused_unread = __atomic_load_n(&s->refused_unread, __ATOMIC_RELAXED);
    out->body_bytes = __atomic_load_n(&s->body_bytes, __ATOMIC_RELAXED);
}

void mt_http_reserve_client(const mt_http_request *req, int seconds) {
    if (req->conn) http_guard_reserve(req->conn, seconds);
}
