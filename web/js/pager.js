// @ts-check
// "Load more" under every paged list (emails, received mail, a webhook's deliveries, suppressions): the
// count line, and a button that fetches the page after the last nextCursor, adds its rows and goes away
// on the last page. The dashboard's one pager.
import { errorBox, h } from './dom.js'

/**
 * @typedef {{ data: unknown[], nextCursor?: string | null }} Page
 * @typedef {object} MorePages
 * @property {HTMLElement} results where the button goes
 * @property {HTMLElement} [count] the line that says how many are shown (none: no such line)
 * @property {Page} first the first page (its rows already added)
 * @property {string} noun
 * @property {string} [plural] default: noun + s
 * @property {(cursor: string) => Promise<Page>} load fetches the page after `cursor`
 * @property {(rows: any[]) => void} addRows
 */

/**
 * Keeps `count` saying how many `noun`s are shown and, while there are more, appends the button to
 * `results`.
 * @param {MorePages} options
 */
export function morePages ({ results, count, first, noun, plural = `${noun}s`, load, addRows }) {
  let cursor = first.nextCursor
  let shown = first.data.length
  const update = () => { if (count) count.textContent = `${shown} ${shown === 1 ? noun : plural} shown${cursor ? ', more below' : ''}` }
  update()
  if (!cursor) return
  const more = h('button', { type: 'button', class: 'button secondary' }, 'Load more')
  const pager = h('div', { class: 'pager' }, more)
  results.append(pager)
  more.addEventListener('click', async () => {
    more.disabled = true
    more.textContent = 'Loading…'
    try {
      const page = await load(cursor)
      addRows(page.data)
      shown += page.data.length
      cursor = page.nextCursor
      update()
      if (!cursor) pager.remove()
    } catch (err) {
      pager.append(errorBox(err))
    } finally {
      more.disabled = false
      more.textContent = 'Load more'
    }
  })
}
