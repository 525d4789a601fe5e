/* CUPTI's cupti_callbacks.h includes the toolkit's builtin_types.h; nothing
 * of it is needed by the collector (see cuda.h here). */
