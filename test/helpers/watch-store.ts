// A real store with the answers of one of its methods written down: tests that need to know what the
// mailer asked the store and got (a claim's emails, whether an outcome applied) without changing a thing.
import type { Store } from '../../src/store/types.js'

/** `store`, except that every answer of its `method` (one that returns a promise of T) is also handed to `seen`, in order. */
export function watchStore<T> (store: Store, method: keyof Store, seen: (answer: T) => void): Store {
  return new Proxy(store, {
    get (target, prop) {
      if (prop === method) {
        const real = Reflect.get(target, prop, target) as (...args: unknown[]) => Promise<T>
        return async (...args: unknown[]) => {
          const answer = await real.apply(target, args)
          seen(answer)
          return answer
        }
      }
      const value: unknown = Reflect.get(target, prop, target)
      return typeof value === 'function' ? value.bind(target) : value
    },
  })
}
