// A small typed event emitter (no dependency; the same in Node and browsers).
export class Emitter {
    listeners = new Map();
    /** Calls `listener` for every `event`; returns a function that removes it. */
    on(event, listener) {
        let set = this.listeners.get(event);
        if (!set)
            this.listeners.set(event, (set = new Set()));
        set.add(listener);
        return () => this.off(event, listener);
    }
    /** Calls `listener` for the next `event` only. */
    once(event, listener) {
        const off = this.on(event, (value) => {
            off();
            listener(value);
        });
        return off;
    }
    off(event, listener) {
        this.listeners.get(event)?.delete(listener);
    }
    emit(event, value) {
        for (const listener of [...(this.listeners.get(event) ?? [])]) {
            try {
                listener(value);
            }
            catch (error) {
                // A listener's failure must not stop the client's own bookkeeping, nor other listeners.
                queueMicrotask(() => {
                    throw error;
                });
            }
        }
    }
}
