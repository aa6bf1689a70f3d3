#ifndef REWIND_CMICROHTTPD_SHIM_H
#define REWIND_CMICROHTTPD_SHIM_H
#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <microhttpd.h>

// libmicrohttpd is loaded when a recorder starts serving (dlopen), not linked: it pulls in GnuTLS and its
// dependencies (about 2 MiB resident once initialised), which no other command should pay for, and the binary then
// needs only libsqlite3 and liblz4 to start.

/// The libmicrohttpd functions the control uses, resolved by ``rewind_mhd_load``.
struct rewind_mhd_api {
    struct MHD_Daemon *(*start_daemon)(unsigned int, uint16_t, MHD_AcceptPolicyCallback, void *,
                                       MHD_AccessHandlerCallback, void *, ...);
    void (*stop_daemon)(struct MHD_Daemon *);
    const char *(*lookup_connection_value)(struct MHD_Connection *, enum MHD_ValueKind, const char *);
    int (*get_connection_values)(struct MHD_Connection *, enum MHD_ValueKind, MHD_KeyValueIterator, void *);
    struct MHD_Response *(*create_response_from_buffer)(size_t, void *, enum MHD_ResponseMemoryMode);
    struct MHD_Response *(*create_response_from_callback)(uint64_t, size_t, MHD_ContentReaderCallback, void *,
                                                          MHD_ContentReaderFreeCallback);
    void (*destroy_response)(struct MHD_Response *);
    enum MHD_Result (*add_response_header)(struct MHD_Response *, const char *, const char *);
    enum MHD_Result (*queue_response)(struct MHD_Connection *, unsigned int, struct MHD_Response *);
    const union MHD_ConnectionInfo *(*get_connection_info)(struct MHD_Connection *, enum MHD_ConnectionInfoType, ...);
    enum MHD_Result (*set_connection_option)(struct MHD_Connection *, enum MHD_CONNECTION_OPTION, ...);
};

/// Loads libmicrohttpd (soname 12) and resolves `api`. Returns NULL, or what failed (dlerror's text).
static inline const char *rewind_mhd_load(struct rewind_mhd_api *api) {
    void *library = dlopen("libmicrohttpd.so.12", RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) return dlerror();
#define REWIND_MHD_RESOLVE(field, name)                                                                              \
    *(void **)(&api->field) = dlsym(library, name);                                                                 \
    if (api->field == NULL) return dlerror();
    REWIND_MHD_RESOLVE(start_daemon, "MHD_start_daemon")
    REWIND_MHD_RESOLVE(stop_daemon, "MHD_stop_daemon")
    REWIND_MHD_RESOLVE(lookup_connection_value, "MHD_lookup_connection_value")
    REWIND_MHD_RESOLVE(get_connection_values, "MHD_get_connection_values")
    REWIND_MHD_RESOLVE(create_response_from_buffer, "MHD_create_response_from_buffer")
    REWIND_MHD_RESOLVE(create_response_from_callback, "MHD_create_response_from_callback")
    REWIND_MHD_RESOLVE(destroy_response, "MHD_destroy_response")
    REWIND_MHD_RESOLVE(add_response_header, "MHD_add_response_header")
    REWIND_MHD_RESOLVE(queue_response, "MHD_queue_response")
    REWIND_MHD_RESOLVE(get_connection_info, "MHD_get_connection_info")
    REWIND_MHD_RESOLVE(set_connection_option, "MHD_set_connection_option")
#undef REWIND_MHD_RESOLVE
    return NULL;
}

/// Called by libmicrohttpd with each request's raw target, before its `%` escapes are decoded: returns the
/// request's first state, a marker (the address 1) when the target holds `%00`, else NULL. Decoded, a `%00` would
/// end the C strings the path and the query arguments are handed over as (`/v1/markers/7%00x` would read as
/// `/v1/markers/7`), so such a request is refused instead.
static inline void *rewind_mhd_mark_nul(void *context, const char *uri, struct MHD_Connection *connection) {
    (void)context;
    (void)connection;
    return strstr(uri, "%00") != NULL ? (void *)1 : NULL;
}

/// The socket of `connection`, or -1 (MHD_get_connection_info is variadic, which Swift cannot call).
static inline int rewind_mhd_connection_socket(const struct rewind_mhd_api *api, struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = api->get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info == NULL ? -1 : info->connect_fd;
}
/// Sets how long `connection` may make no progress before it is closed (MHD_set_connection_option is variadic).
static inline void rewind_mhd_set_timeout(
    const struct rewind_mhd_api *api, struct MHD_Connection *connection, unsigned int seconds) {
    (void)api->set_connection_option(connection, MHD_CONNECTION_OPTION_TIMEOUT, seconds);
}
/// Starts a daemon on a listening socket the caller bound (`listen_fd`, any family: a Unix socket works), one
/// thread per connection. MHD_start_daemon is variadic, which Swift cannot call; this fixes the options.
/// `connection_limit` is MHD's own hard limit (beyond it MHD closes connections without a reply),
/// `timeout_seconds` the idle timeout, `memory_limit` the per-connection memory (bounds the request line and
/// headers). Returns NULL when the daemon cannot start.
static inline struct MHD_Daemon *rewind_mhd_start(
    const struct rewind_mhd_api *api, int listen_fd, unsigned int connection_limit, unsigned int timeout_seconds,
    size_t memory_limit, MHD_AccessHandlerCallback handler, void *handler_context,
    MHD_RequestCompletedCallback completed, MHD_NotifyConnectionCallback notify) {
    return api->start_daemon(
        MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC, 0, NULL, NULL, handler,
        handler_context, MHD_OPTION_LISTEN_SOCKET, (MHD_socket)listen_fd, MHD_OPTION_CONNECTION_LIMIT,
        connection_limit, MHD_OPTION_CONNECTION_TIMEOUT, timeout_seconds, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
        memory_limit, MHD_OPTION_NOTIFY_COMPLETED, completed, handler_context, MHD_OPTION_NOTIFY_CONNECTION, notify,
        handler_context, MHD_OPTION_URI_LOG_CALLBACK, rewind_mhd_mark_nul, NULL, MHD_OPTION_END);
}
#endif
