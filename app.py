"""stability — a lab for gradient stability in recurrent networks.

    streamlit run app.py
"""
import streamlit as st
import torch

st.set_page_config(page_title="stability", page_icon="〰️", layout="wide")

pages = [
    st.Page("pages/gradient_flow.py", title="Gradient flow", icon="🌊", default=True),
]
navigation = st.navigation(pages)

with st.sidebar:
    if torch.cuda.is_available():
        st.caption(f"Device: **{torch.cuda.get_device_name(0)}** (CUDA)")
    else:
        st.caption(f"Device: **CPU** ({torch.get_num_threads()} threads)")

navigation.run()
