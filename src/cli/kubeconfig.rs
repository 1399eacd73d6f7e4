//! Which cluster a command reads, as kubectl's flags choose it: `--kubeconfig` and `--context`,
//! else `$KUBECONFIG` or `~/.kube/config` with its current context, else the in-cluster config.

use std::path::PathBuf;

use anyhow::Context;

/// `--kubeconfig` and `--context`, as kubectl takes them.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct KubeconfigArgs {
    /// The kubeconfig file to use (default: $KUBECONFIG, else ~/.kube/config, else the
    /// in-cluster config).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long)]
    pub context: Option<String>,
}

impl KubeconfigArgs {
    /// The client configuration these flags name.
    pub async fn config(&self) -> anyhow::Result<kube::Config> {
        let options = kube::config::KubeConfigOptions {
            context: self.context.clone(),
            ..Default::default()
        };
        match (&self.kubeconfig, &self.context) {
            (Some(path), _) => {
                let file = kube::config::Kubeconfig::read_from(path)
                    .with_context(|| format!("reading the kubeconfig {}", path.display()))?;
                kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .with_context(|| match &self.context {
                        Some(c) => format!("the context {c:?} of {}", path.display()),
                        None => format!("the current context of {}", path.display()),
                    })
            }
            (None, Some(context)) => kube::Config::from_kubeconfig(&options)
                .await
                .with_context(|| format!("the kubeconfig's context {context:?}")),
            (None, None) => kube::Config::infer()
                .await
                .context("reading your kubeconfig (or the in-cluster config)"),
        }
    }

    /// A client of the API server these flags name.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        kube::Client::try_from(self.config().await?).context("building the API server's client")
    }
}

/// The API version of what the commands print as JSON or YAML.
pub const OUTPUT_API_VERSION: &str = "tether.dev/v1alpha1";

/// A printed object: its version and kind first, then its fields.
#[derive(serde::Serialize)]
struct Versioned<'a> {
    #[serde(rename = "apiVersion")]
    api_version: &'static str,
    kind: &'a str,
    #[serde(flatten)]
    fields: serde_json::Map<String, serde_json::Value>,
}

/// `value` as a versioned object of `kind` (`apiVersion` and `kind` first; a value that is no
/// object, a list, goes under `items`), in `format` (`json` or `yaml`), with a trailing newline.
pub fn structured<T: serde::Serialize>(
    kind: &str,
    value: &T,
    format: &str,
) -> anyhow::Result<String> {
    let fields = match serde_json::to_value(value)? {
        serde_json::Value::Object(fields) => fields,
        other => serde_json::Map::from_iter([("items".to_string(), other)]),
    };
    let object = Versioned {
        api_version: OUTPUT_API_VERSION,
        kind,
        fields,
    };
    Ok(match format {
        "yaml" => serde_saphyr::to_string(&object).context("writing YAML")?,
        _ => serde_json::to_string_pretty(&object)? + "\n",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a tool reads: the version and kind first, then the fields, in JSON or YAML; a list
    /// under `items`.
    #[test]
    fn structured_output_names_its_version_and_kind() {
        let json =
            structured("Explanation", &serde_json::json!({"pod": "ns/p"}), "json").expect("json");
        let read: serde_json::Value = serde_json::from_str(&json).expect("valid JSON");
        assert_eq!(read["apiVersion"], OUTPUT_API_VERSION);
        assert_eq!(read["kind"], "Explanation");
        assert_eq!(read["pod"], "ns/p");
        let yaml = structured("SimulationList", &vec![1, 2], "yaml").expect("yaml");
        assert!(
            yaml.starts_with("apiVersion: tether.dev/v1alpha1\nkind: SimulationList\n"),
            "{yaml}"
        );
        let read: serde_json::Value = serde_saphyr::from_str(&yaml).expect("valid YAML");
        assert_eq!(read["items"], serde_json::json!([1, 2]));
    }

    /// A context the kubeconfig does not hold is refused, naming it.
    #[tokio::test]
    async fn a_context_the_kubeconfig_lacks_is_refused_by_name() {
        let dir = std::env::temp_dir().join(format!("tether-kubeconfig-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a directory");
        let path = dir.join("config");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\n\
             users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: here\n  context: {cluster: c, user: u, namespace: team}\n\
             current-context: here\n",
        )
        .expect("a kubeconfig");
        let args = |context: Option<&str>| KubeconfigArgs {
            kubeconfig: Some(path.clone()),
            context: context.map(str::to_string),
        };
        let here = args(Some("here"))
            .config()
            .await
            .expect("the context exists");
        assert_eq!(here.default_namespace, "team");
        let err = args(Some("elsewhere"))
            .config()
            .await
            .expect_err("no such context");
        assert!(format!("{err:#}").contains("\"elsewhere\""), "{err:#}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
