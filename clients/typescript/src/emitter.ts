// A small typed event emitter (no dependency; the same in Node and browsers).

export type Listener<T> = (value: T) => void;

export class Emitter<Events extends object> {
  private listeners = new Map<keyof Events, Set<Listener<never>>>();

  /** Calls `listener` for every `event`; returns a function that removes it. */
  on<K extends keyof Events>(event: K, listener: Listener<Events[K]>): () => void {
    let set = this.listeners.get(event);
    if (!set) this.listeners.set(event, (set = new Set()));
    set.add(listener as Listener<never>);
    return () => this.off(event, listener);
  }

  /** Calls `listener` for the next `event` only. */
  once<K extends keyof Events>(event: K, listener: Listener<Events[K]>): () => void {
    const off = this.on(event, (value) => {
      off();
      listener(value);
    });
    return off;
  }

  off<K extends keyof Events>(event: K, listener: Listener<Events[K]>): void {
    this.listeners.get(event)?.delete(listener as Listener<never>);
  }

  protected emit<K extends keyof Events>(event: K, value: Events[K]): void {
    for (const listener of [...(this.listeners.get(event) ?? [])]) {
      try {
        (listener as Listener<Events[K]>)(value);
      } catch (error) {
        // A listener's failure must not stop the client's own bookkeeping, nor other listeners.
        queueMicrotask(() => {
          throw error;
        });
      }
    }
  }
}
